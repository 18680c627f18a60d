package fault

import (
	"reflect"
	"testing"
	"time"
)

func TestParseOpened(t *testing.T) {
	at := time.Date(2026, 12, 1, 14, 20, 6, 859e6, time.UTC)
	for _, tc := range []struct {
		line string
		want Opened
		ok   bool
	}{
		{`time=2026-12-01T14:20:06.859Z level=DEBUG msg="sluice: streamlet opened" channel=fault.r2.0 streamlet=13528510914923331585 hosts="[b c]" first=1883383852284510208 epoch=1883383852284510208 after_lost=false`,
			Opened{at, "fault.r2.0", 13528510914923331585, []string{"b", "c"}}, true},
		{`time=2026-12-01T14:20:06.859Z level=DEBUG msg="sluice: streamlet opened" channel=x streamlet=7 hosts=[d] first=1 epoch=1 after_lost=true`,
			Opened{at, "x", 7, []string{"d"}}, true},
		{`time=2026-12-01T14:20:06.859Z level=DEBUG msg="sluice: streamlets lost with their host" channel=x node=c next=5`, Opened{}, false},
		{`time=bad level=DEBUG msg="sluice: streamlet opened" channel=x streamlet=7 hosts="[a b]"`, Opened{}, false},
		{``, Opened{}, false},
	} {
		got, ok := ParseOpened(tc.line)
		if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseOpened(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

func TestOpenSetsAndRoles(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ops := []Opened{
		{t0.Add(2 * time.Second), "x", 2, []string{"c", "b"}},
		{t0, "x", 1, []string{"b", "c"}},
		{t0.Add(time.Second), "y", 3, []string{"b", "c"}},
		{t0.Add(5 * time.Second), "y", 4, []string{"c", "b"}}, // after the moment asked
		{t0.Add(time.Second), "z", 5, []string{"a", "c"}},
	}
	open := OpenSets(ops, t0.Add(3*time.Second))
	want := map[string][]string{"x": {"c", "b"}, "y": {"b", "c"}, "z": {"a", "c"}}
	if !reflect.DeepEqual(open, want) {
		t.Fatalf("OpenSets = %v, want %v", open, want)
	}
	mgr := func(ch string) string { return map[string]string{"x": "a", "y": "a", "z": "b"}[ch] }
	chans := []string{"x", "y", "z"}
	for _, tc := range []struct {
		node string
		want Roles
	}{
		{"a", Roles{Node: "a", Managed: 2, Ordered: 1, Held: 1, Pubs: 2, Subs: 1}},
		{"b", Roles{Node: "b", Managed: 1, Ordered: 1, Followed: 1, Held: 4}},
		{"c", Roles{Node: "c", Ordered: 1, Followed: 2, Held: 5, Subs: 1}},
		{"d", Roles{Node: "d"}},
	} {
		if got := RolesOf(tc.node, chans, mgr, ops, open, []string{"a", "a"}, []string{"a", "c"}); got != tc.want {
			t.Errorf("RolesOf(%s) = %+v, want %+v", tc.node, got, tc.want)
		}
	}
}

func TestMostSharedAndMostAlone(t *testing.T) {
	open := map[string][]string{"x": {"a", "b", "c"}, "y": {"b", "c", "d"}, "z": {"c", "d", "e"}, "w": {"b", "c", "e"}}
	if x, y, n := MostShared(open, []string{"a", "b", "c", "d", "e"}); x != "b" || y != "c" || n != 3 {
		t.Errorf("MostShared = %s, %s, %d; want b, c, 3", x, y, n)
	}
	ops := []Opened{{Hosts: []string{"d", "e"}}, {Hosts: []string{"c", "e"}}, {Hosts: []string{"e", "d"}}, {Hosts: []string{"a", "d"}},
		{Hosts: []string{"c", "d", "e"}}}
	if x, y, n := MostAlone(ops, []string{"c", "d", "e"}); x != "d" || y != "e" || n != 2 {
		t.Errorf("MostAlone = %s, %s, %d; want d, e, 2", x, y, n)
	}
	if x, y, n := MostAlone(nil, []string{"c", "d", "e"}); x != "c" || y != "d" || n != 0 {
		t.Errorf("MostAlone of nothing = %s, %s, %d; want c, d, 0", x, y, n)
	}
}
