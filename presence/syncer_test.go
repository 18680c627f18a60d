package presence

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memNet connects Syncers in memory; a cut node's calls fail.
type memNet struct {
	mu   sync.Mutex
	regs map[string]*Registry
	cut  map[string]bool
}

func (n *memNet) caller(from string) Caller {
	return func(to string, body []byte) ([]byte, error) {
		n.mu.Lock()
		r, cut := n.regs[to], n.cut[from] || n.cut[to]
		n.mu.Unlock()
		if r == nil || cut {
			return nil, errors.New("unreachable")
		}
		return r.Serve(from, body)
	}
}

// eventually polls cond every millisecond for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within %v", what, d)
}

// TestSyncerConverges: three Syncers over an in-memory network bring
// every node's changes to every other node, also across a cut that heals
// (the pushes are retried) and while a node's membership flaps; Close
// ends every goroutine.
func TestSyncerConverges(t *testing.T) {
	net := &memNet{regs: map[string]*Registry{}, cut: map[string]bool{}}
	var syncers []*Syncer
	names := []string{"a", "b", "c"}
	for _, n := range names {
		r, _ := newTest(n, testLimits)
		net.regs[n] = r
		syncers = append(syncers, NewSyncer(r, net.caller(n)))
	}
	for _, s := range syncers {
		s.SetPeers(names)
	}
	sees := func(node string, want ...string) func() bool {
		return func() bool {
			_, ms, _ := query(net.regs[node], "room")
			return slices.Equal(ms, want)
		}
	}
	_ = net.regs["a"].Join("room", 1, "x", nil)
	eventually(t, 5*time.Second, "b and c see a's member", func() bool { return sees("b", "a/1/x")() && sees("c", "a/1/x")() })
	net.mu.Lock()
	net.cut["c"] = true
	net.mu.Unlock()
	_ = net.regs["b"].Join("room", 2, "y", nil)
	net.regs["a"].Leave("room", 1, "x")
	eventually(t, 5*time.Second, "a sees b's member", sees("a", "b/2/y"))
	if sees("c", "b/2/y")() {
		t.Fatal("c got a push while cut off")
	}
	net.mu.Lock()
	net.cut["c"] = false
	net.mu.Unlock()
	eventually(t, 5*time.Second, "c catches up after the cut", sees("c", "b/2/y"))
	syncers[0].SetPeers([]string{"a", "c"}) // a sees b gone a moment
	syncers[0].SetPeers(names)
	eventually(t, 5*time.Second, "a sees b's member again", sees("a", "b/2/y"))
	var sent atomic.Int64
	for _, s := range syncers {
		s.Close()
		sent.Add(s.r.Stats().Sync.Sent)
		if n := s.Goroutines(); n != 0 {
			t.Fatalf("%d goroutines after Close", n)
		}
	}
	if sent.Load() == 0 {
		t.Fatal("no push counted as sent")
	}
}
