package meta

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// parseHex parses annotated hex (testdata/*.hex: '#' starts a comment).
func parseHex(t testing.TB, path string) []byte {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var digits strings.Builder
	for _, line := range strings.Split(string(src), "\n") {
		line, _, _ = strings.Cut(line, "#")
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

// The golden vectors, checked both ways: encode(value) == golden and
// decode(golden) == value.
func TestCmdGolden(t *testing.T) {
	now := int64(1760000000000) * 1_000_000
	for file, c := range map[string]Cmd{
		"testdata/open.hex": {Kind: KindOpen, Time: now, Channel: "chat", Epoch: 1760000000000, Tail: 7,
			Seal: Seal{End: 101, TTL: ttl}, New: NewStreamlet{ID: 8, Replicas: []string{"a", "b"}, Life: life}},
		"testdata/expire.hex": {Kind: KindExpire, Time: now, Batch: []Ref{
			{Channel: "chat", Epoch: 1760000000000, ID: 7}, {Channel: "news", Epoch: 1760000000001, ID: 12}}},
	} {
		golden := parseHex(t, file)
		if got := AppendCmd(nil, &c); !bytes.Equal(got, golden) {
			t.Errorf("%s: encoded\n%x\nwant\n%x", file, got, golden)
		}
		got, err := DecodeCmd(golden)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("%s: decoded %+v, %v; want %+v", file, got, err, c)
		}
	}
}

func cmdCases() []Cmd {
	return []Cmd{
		{Kind: KindCreate, Time: 5, Channel: "c", Epoch: 77},
		{Kind: KindOpen, Time: 6, Channel: "c", Epoch: 9, Tail: 3, Seal: Seal{End: 10, Lost: true, Keep: []string{"x", "y"}, TTL: 7},
			New: NewStreamlet{ID: 4, Replicas: []string{"a"}, Life: 8}},
		{Kind: KindClose, Time: 6, Channel: "c", Epoch: 9, Tail: 3, Seal: Seal{End: 10, TTL: 7}},
		{Kind: KindHolders, Time: 6, Channel: "c", Epoch: 9, Tail: 3, Add: []string{"n"}, Remove: []string{"o", "p"}},
		{Kind: KindNodeGone, Time: 6, Node: "n", Instance: "i2"},
		{Kind: KindExpire, Time: 6, Batch: []Ref{{Channel: "c", Epoch: 1, ID: 2}}},
		{Kind: KindDrop, Time: 6, Batch: []Ref{{Channel: "c", Epoch: 1}, {Channel: "d", Epoch: 2}}},
	}
}

func TestCmdRoundTrip(t *testing.T) {
	for _, c := range cmdCases() {
		b := AppendCmd([]byte("prefix"), &c)
		got, err := DecodeCmd(b[len("prefix"):])
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("%v: decoded %+v, %v", c.Kind, got, err)
		}
	}
}

// Every truncation and every extension of a valid command is malformed,
// and the error names what was decoded.
func TestCmdMalformed(t *testing.T) {
	for _, c := range cmdCases() {
		b := AppendCmd(nil, &c)
		for n := 0; n < len(b); n++ {
			if _, err := DecodeCmd(b[:n]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%v cut at %d: %v", c.Kind, n, err)
			}
		}
		if _, err := DecodeCmd(append(b, 0)); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "trailing") {
			t.Fatalf("%v with a trailing byte: %v", c.Kind, err)
		}
	}
	for name, b := range map[string][]byte{
		"unknown kind":  {0x63, 0, 0, 0, 0, 0, 0, 0, 0},
		"empty channel": {byte(KindCreate), 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"bad flag":      AppendCmd(nil, &Cmd{Kind: KindClose, Channel: "c", Seal: Seal{}}),
		"huge batch":    {byte(KindDrop), 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff},
		"repeated name": {byte(KindHolders), 0, 0, 0, 0, 0, 0, 0, 0, 1, 'c', 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 2, 1, 'a', 1, 'a', 0},
	} {
		if name == "bad flag" {
			b[len(b)-8-1-1] = 2 // the lost flag of the seal
		}
		_, err := DecodeCmd(b)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzDecodeCmd: no input panics; what decodes re-encodes to the same
// bytes and decodes to the same command (decode(encode(x)) == x).
func FuzzDecodeCmd(f *testing.F) {
	for _, c := range cmdCases() {
		f.Add(AppendCmd(nil, &c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCmd(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again := AppendCmd(nil, &c)
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, input %x", again, b)
		}
	})
}

// FuzzApply: any sequence of inputs applied to a state keeps every
// channel's invariants, and two states fed the same inputs stay equal.
func FuzzApply(f *testing.F) {
	var seq []byte
	for _, c := range cmdCases() {
		b := AppendCmd(nil, &c)
		seq = append(append(seq, byte(len(b))), b...)
	}
	f.Add(seq)
	f.Fuzz(func(t *testing.T, b []byte) {
		s1, s2 := New(), New()
		for i := uint64(1); len(b) > 0; i++ {
			n := min(int(b[0]), len(b)-1)
			cmd := b[1 : 1+n]
			b = b[1+n:]
			if r1, r2 := s1.Apply(i, cmd), s2.Apply(i, cmd); !bytes.Equal(r1, r2) {
				t.Fatalf("replicas answered %v and %v", r1, r2)
			}
		}
		s1.Range(func(c *Channel) bool {
			if e := c.check(); e != "" {
				t.Fatalf("channel %q: %s", c.Name, e)
			}
			return true
		})
		if !bytes.Equal(s1.AppendSnapshot(nil), s2.AppendSnapshot(nil)) {
			t.Fatalf("replicas diverged")
		}
	})
}

// FuzzRestore: no snapshot input panics, and one that restores encodes
// back to itself.
func FuzzRestore(f *testing.F) {
	s := New()
	c := openCmd("x", 5, 0, 0, 7, t0, "a", "b")
	s.ApplyCmd(1, &c)
	f.Add(s.AppendSnapshot(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := New()
		if err := r.Restore(bytes.NewReader(b), 1<<20); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if got := r.AppendSnapshot(nil); !bytes.Equal(got, b) {
			t.Fatalf("restored %x encodes as %x", b, got)
		}
	})
}
