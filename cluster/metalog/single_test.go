package metalog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

var _ Log = (*Single)(nil)
var _ Log = (*Raft)(nil)

// TestSingle_ProposeAppliesInOrder: concurrent proposers each get their
// own index, the indices are 1..n without a gap, and the FSM saw them in
// order on whichever goroutine proposed.
func TestSingle_ProposeAppliesInOrder(t *testing.T) {
	fsm := newKV()
	s := NewSingle("a", fsm, 0)
	const workers, each = 8, 200
	var mu sync.Mutex
	seen := make(map[uint64]bool)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				res, idx, err := s.Propose(context.Background(), setCmd(fmt.Sprintf("k%d", w), fmt.Sprint(i)))
				if err != nil || string(res) != "ok" {
					t.Errorf("propose: %q %v", res, err)
					return
				}
				mu.Lock()
				if seen[idx] {
					t.Errorf("index %d returned twice", idx)
				}
				seen[idx] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i := uint64(1); i <= workers*each; i++ {
		if !seen[i] {
			t.Fatalf("index %d never returned", i)
		}
	}
	if err := fsm.err(); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.LastIndex != workers*each || st.AppliedIndex != workers*each || st.FirstIndex != 1 {
		t.Fatalf("status %+v", st)
	}
}

// TestSingle_CompareAndSetStaleLoses: the FSM's result comes back to the
// proposer; a compare-and-set against a value that changed loses.
func TestSingle_CompareAndSetStaleLoses(t *testing.T) {
	s := NewSingle("a", newKV(), 0)
	ctx := context.Background()
	if res, _, _ := s.Propose(ctx, casCmd("k", "", "v1")); string(res) != "ok" {
		t.Fatalf("first cas: %q", res)
	}
	if res, _, _ := s.Propose(ctx, casCmd("k", "", "v2")); string(res) != "conflict:v1" {
		t.Fatalf("stale cas: %q", res)
	}
	if res, _, _ := s.Propose(ctx, casCmd("k", "v1", "v2")); string(res) != "ok" {
		t.Fatalf("fresh cas: %q", res)
	}
}

// TestSingle_AlwaysLeader: Leader, Leadership and its one signal.
func TestSingle_AlwaysLeader(t *testing.T) {
	s := NewSingle("a", newKV(), 0)
	if n, self := s.Leader(); n != "a" || !self {
		t.Fatalf("Leader() = %q, %v", n, self)
	}
	select {
	case <-s.LeadershipChanged():
	default:
		t.Fatal("no initial signal")
	}
	select {
	case <-s.LeadershipChanged():
		t.Fatal("a second signal")
	default:
	}
	if l := s.Leadership(); l != (Leadership{Term: 1, Leader: "a", LeaderID: "a", Self: true}) {
		t.Fatalf("Leadership() = %+v", l)
	}
	if err := s.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.State != "leader" || len(st.Voters) != 1 || st.Voters[0].Node != "a" {
		t.Fatalf("status %+v", st)
	}
}

// TestSingle_Refusals: a cancelled context, a command over the limit, and
// a shut down log refuse without applying.
func TestSingle_Refusals(t *testing.T) {
	fsm := newKV()
	s := NewSingle("a", fsm, 8)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.Propose(ctx, setCmd("k", "v")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if _, _, err := s.Propose(context.Background(), setCmd("key", "value")); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Propose(context.Background(), []byte{'s', 0, 0, 0, 0}); !errors.Is(err, ErrShutdown) {
		t.Fatalf("after shutdown: %v", err)
	}
	if err := s.Barrier(context.Background()); !errors.Is(err, ErrShutdown) {
		t.Fatalf("barrier after shutdown: %v", err)
	}
	if fsm.applied != 0 {
		t.Fatalf("%d commands applied", fsm.applied)
	}
	if st := s.Status(); st.State != "shutdown" {
		t.Fatalf("state %q", st.State)
	}
}
