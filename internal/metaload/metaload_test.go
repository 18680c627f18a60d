package metaload

import (
	"testing"

	"github.com/sluice-rtm/sluice/meta"
)

// TestEveryCommandApplies: applied in order, every generated command
// succeeds, and after enough rounds every channel retains Keep streamlets
// of Replicas holders each, the newest open.
func TestEveryCommandApplies(t *testing.T) {
	const chans, keep = 50, 4
	l := New(Config{Channels: chans, Keep: keep, ExpireBatch: 7})
	s := meta.New()
	var idx uint64
	for l.Opens() < chans*(keep+3) {
		c := l.Next()
		idx++
		if r := meta.Result(s.Apply(idx, meta.AppendCmd(nil, &c))[0]); r != meta.ResultOK {
			t.Fatalf("command %d (%v of %q): %v", idx, c.Kind, c.Channel, r)
		}
	}
	if s.Len() != chans {
		t.Fatalf("%d channels, want %d", s.Len(), chans)
	}
	s.Range(func(c *meta.Channel) bool {
		// Up to ExpireBatch-1 channels wait for their EXPIRE.
		if n := len(c.List); n < keep || n > keep+1 {
			t.Errorf("%s retains %d streamlets, want %d (or one more awaiting its expiry)", c.Name, n, keep)
		}
		if _, open := c.Open(); !open {
			t.Errorf("%s has no open streamlet", c.Name)
		}
		for _, r := range c.List {
			if len(r.Set()) != 2 {
				t.Errorf("%s: streamlet %d has replicas %v", c.Name, r.ID, r.Set())
			}
		}
		return true
	})
	if got := len(Name(4242)); got != 22 {
		t.Fatalf("name of %d bytes", got)
	}
}
