package metalog

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func TestParseServerID(t *testing.T) {
	cases := []struct {
		id, node string
		ok       bool
	}{
		{"a@0123456789abcdef", "a", true},
		{"a@b@0123456789abcdef", "a@b", true},
		{"@0123456789abcdef", "", false},
		{"a@0123456789ABCDEF", "", false},
		{"a@0123456789abcde", "", false},
		{"a@0123456789abcdef0", "", false},
		{"a0123456789abcdef", "", false},
		{"", "", false},
	}
	for _, c := range cases {
		node, inc, ok := parseServerID(c.id)
		if ok != c.ok || node != c.node || ok && serverID(node, inc) != c.id {
			t.Errorf("parseServerID(%q) = %q, %q, %v", c.id, node, inc, ok)
		}
	}
	if nodeOf("not-ours") != "not-ours" || nodeOf("n@0000000000000000") != "n" {
		t.Error("nodeOf")
	}
}

// FuzzParseServerID: an id that parses is rebuilt exactly from its parts,
// its node part is not empty, and its incarnation is 16 hex digits.
func FuzzParseServerID(f *testing.F) {
	for _, s := range []string{"a@0123456789abcdef", "a@b@0123456789abcdef", "@", "x@0123456789abcdeg"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		node, inc, ok := parseServerID(id)
		if !ok {
			if node != "" || inc != "" {
				t.Fatalf("failed parse returned %q, %q", node, inc)
			}
			return
		}
		if serverID(node, inc) != id || node == "" || len(inc) != incarnationHex || strings.Trim(inc, "0123456789abcdef") != "" {
			t.Fatalf("parseServerID(%q) = %q, %q", id, node, inc)
		}
	})
}

// TestLoadIdentity: the first start draws and stores an id; later starts
// read it back; a store of another node, or with a malformed id, is
// refused.
func TestLoadIdentity(t *testing.T) {
	st := raft.NewInmemStore()
	id, created, err := loadIdentity(st, "a")
	if err != nil || !created {
		t.Fatalf("first: %q %v %v", id, created, err)
	}
	if node, _, ok := parseServerID(id); !ok || node != "a" {
		t.Fatalf("id %q", id)
	}
	again, created, err := loadIdentity(st, "a")
	if err != nil || created || again != id {
		t.Fatalf("second: %q %v %v", again, created, err)
	}
	if _, _, err := loadIdentity(st, "b"); !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), `belongs to node "a"`) {
		t.Fatalf("other node: %v", err)
	}
	_ = st.Set(stableIDKey, []byte("garbage"))
	if _, _, err := loadIdentity(st, "a"); !errors.Is(err, ErrIdentity) {
		t.Fatalf("malformed: %v", err)
	}
	other, _, err := loadIdentity(raft.NewInmemStore(), "a")
	if err != nil || other == id {
		t.Fatalf("a new store drew %q (first %q): %v", other, id, err)
	}
}

func TestRaftAddress(t *testing.T) {
	a := raftAddress("127.0.0.1:7000", "n@0123456789abcdef")
	if hp, id := splitRaftAddress(a); hp != "127.0.0.1:7000" || id != "n@0123456789abcdef" {
		t.Fatalf("%q -> %q %q", a, hp, id)
	}
	if hp, id := splitRaftAddress("[::1]:7000/n/x@0123456789abcdef"); hp != "[::1]:7000" || id != "n/x@0123456789abcdef" {
		t.Fatalf("%q %q", hp, id)
	}
	if _, id := splitRaftAddress("127.0.0.1:7000"); id != "" {
		t.Fatal("no id")
	}
}
