package cluster

import (
	"fmt"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// TestConfirmed: a manager's role is confirmed only by a strict majority
// of the known nodes naming it, each from its own view; a node that did
// not answer names nobody.
func TestConfirmed(t *testing.T) {
	for _, c := range []struct {
		name  string
		self  string
		names []string
		known int
		ok    bool
		other string
	}{
		{"all three name a", "a", []string{"a", "a", "a"}, 3, true, ""},
		{"a and c name a, b names itself (b cut from a)", "a", []string{"a", "a", "b"}, 3, true, "b"},
		{"b's partial view: b, c names a, a unreachable", "b", []string{"a", "b"}, 3, false, "a"},
		{"b alone names b", "b", []string{"b"}, 3, false, ""},
		{"two of three name a: known 3", "a", []string{"a", "a"}, 3, true, ""},
		{"half of four is no majority", "a", []string{"a", "a", "c", "c"}, 4, false, "c"},
		{"three of four", "a", []string{"a", "a", "a", "c"}, 4, true, "c"},
		{"known counts nodes that did not answer", "a", []string{"a", "a"}, 5, false, ""},
		{"more answers than known: answers count", "a", []string{"a", "a", "b", "b"}, 3, false, "b"},
		{"an empty name (no manager in that view) is no vote", "a", []string{"a", "", ""}, 3, false, ""},
		{"the name most others gave, ties by name", "a", []string{"a", "c", "b"}, 3, false, "b"},
		{"single node", "a", []string{"a"}, 1, true, ""},
	} {
		ok, other := confirmed(c.self, c.names, c.known)
		if ok != c.ok || other != c.other {
			t.Errorf("%s: confirmed(%q, %q, %d) = %v, %q; want %v, %q", c.name, c.self, c.names, c.known, ok, other, c.ok, c.other)
		}
	}
}

// TestNodeOps_ManagerGolden: MANAGER's request and result as PROTOCOL.md
// 9.5 gives them byte by byte.
func TestNodeOps_ManagerGolden(t *testing.T) {
	var e wire.NodeEnc
	e.Str8("orders")
	want := "00000008420000000005" + "13" + "06" + "6f7264657273"
	if got := fmt.Sprintf("%x", wire.AppendNodeRequest(nil, 5, wire.OpManager, e.B)); got != want {
		t.Fatalf("request %s, want %s", got, want)
	}
	var r wire.NodeEnc
	r.Str8("a")
	want = "0000000343000000000500" + "0161"
	if got := fmt.Sprintf("%x", wire.AppendNodeResponse(nil, 5, wire.NodeOK, r.B, "")); got != want {
		t.Fatalf("result %s, want %s", got, want)
	}
	if m, err := decManagerResult(r.B); err != nil || m != "a" {
		t.Fatalf("decoded %q %v", m, err)
	}
	if m, err := decManagerResult([]byte{0}); err != nil || m != "" {
		t.Fatalf("no manager: decoded %q %v", m, err)
	}
	for name, b := range map[string][]byte{
		"empty":     nil,
		"truncated": {2, 'a'},
		"trailing":  {1, 'a', 9},
	} {
		if m, err := decManagerResult(b); err == nil {
			t.Errorf("%s: decoded %q", name, m)
		}
	}
}

// FuzzManagerResult: a MANAGER result from a peer never panics the
// decoder, and what decodes re-encodes to the same bytes.
func FuzzManagerResult(f *testing.F) {
	f.Add([]byte{1, 'a'})
	f.Add([]byte{0})
	f.Add([]byte{3, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decManagerResult(b)
		if err != nil {
			return
		}
		var e wire.NodeEnc
		e.Str8(m)
		if string(e.B) != string(b) {
			t.Fatalf("re-encoded %x, want %x", e.B, b)
		}
	})
}
