package metalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/metaload"
	"github.com/sluice-rtm/sluice/meta"
)

// metaFSM is package meta's state machine as the log's FSM, as package
// cluster wires it, timing each snapshot's capture (the time Apply waits
// for it) and its Persist.
type metaFSM struct {
	st *meta.State
	// eager encodes the whole state in Snapshot, on the FSM goroutine (how
	// package cluster took snapshots before meta.State.Snapshot): the
	// benchmarks compare it in the same run.
	eager atomic.Bool

	mu       sync.Mutex
	captures []time.Duration // Snapshot: the time no command could apply
	persists []time.Duration // Persist, on raft's snapshot goroutine
	restores []time.Duration
}

func newMetaFSM() *metaFSM { return &metaFSM{st: meta.New()} }

func (f *metaFSM) Apply(index uint64, cmd []byte) []byte { return f.st.Apply(index, cmd) }

func (f *metaFSM) Snapshot() (Snapshot, error) {
	start := time.Now()
	var s Snapshot
	if f.eager.Load() {
		s = eagerSnapshot(f.st.AppendSnapshot(nil))
	} else {
		s = f.st.Snapshot()
	}
	d := time.Since(start)
	f.mu.Lock()
	f.captures = append(f.captures, d)
	f.mu.Unlock()
	return timedSnapshot{s, f}, nil
}

func (f *metaFSM) Restore(r io.Reader) error {
	start := time.Now()
	err := f.st.Restore(r, 1<<30)
	f.mu.Lock()
	f.restores = append(f.restores, time.Since(start))
	f.mu.Unlock()
	return err
}

// timings returns copies of the durations recorded.
func (f *metaFSM) timings() (captures, persists, restores []time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.captures), slices.Clone(f.persists), slices.Clone(f.restores)
}

type eagerSnapshot []byte

func (s eagerSnapshot) Persist(w io.Writer) error { _, err := w.Write(s); return err }
func (eagerSnapshot) Release()                    {}

type timedSnapshot struct {
	Snapshot
	f *metaFSM
}

func (s timedSnapshot) Persist(w io.Writer) error {
	start := time.Now()
	err := s.Snapshot.Persist(w)
	s.f.mu.Lock()
	s.f.persists = append(s.f.persists, time.Since(start))
	s.f.mu.Unlock()
	return err
}

// dump renders a state for comparison, through its concurrency-safe
// readers: the applied index, the epoch floor, the node incarnations and
// every channel.
func dump(st *meta.State) string {
	var chans []string
	st.Range(func(c *meta.Channel) bool {
		chans = append(chans, fmt.Sprintf("%+v", *c))
		return true
	})
	slices.Sort(chans)
	inst := st.Instances()
	var b strings.Builder
	fmt.Fprintf(&b, "applied %d floor %d\n", st.Applied(), st.EpochFloor())
	for _, n := range slices.Sorted(maps.Keys(inst)) {
		fmt.Fprintf(&b, "node %s %s\n", n, inst[n])
	}
	b.WriteString(strings.Join(chans, "\n"))
	return b.String()
}

// proposer proposes a metaload stream through the leader from several
// goroutines (group commit), recording each entry's length by index. A
// proposal that fails because the leadership moved is retried on the new
// leader.
type proposer struct {
	leader func() Log // the current leader, waited for
	cur    atomic.Pointer[Log]

	mu        sync.Mutex
	load      *metaload.Load
	sizes     map[uint64]int // index -> command length
	conflicts atomic.Int64   // results other than OK (a rollover overtaken by the next, which cannot happen with fewer commands in flight than channels)
	retries   atomic.Int64   // proposals retried on a new leader
	last      atomic.Uint64  // the highest index committed
}

func newProposer(l *metaload.Load, leader func() Log) *proposer {
	pr := &proposer{leader: leader, load: l, sizes: make(map[uint64]int)}
	lead := leader()
	pr.cur.Store(&lead)
	return pr
}

// next returns the next command, or false once the load has made opens
// OPENs (0: no limit).
func (pr *proposer) next(opens uint64) ([]byte, bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if opens > 0 && pr.load.Opens() >= opens {
		return nil, false
	}
	c := pr.load.Next()
	return meta.AppendCmd(nil, &c), true
}

// propose proposes b through the leader until it is committed.
func (pr *proposer) propose(b []byte) error {
	for try := 0; ; try++ {
		l := pr.cur.Load()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		res, idx, err := (*l).Propose(ctx, b)
		cancel()
		if err == nil {
			if meta.Result(res[0]) != meta.ResultOK {
				pr.conflicts.Add(1)
			}
			pr.mu.Lock()
			pr.sizes[idx] = len(b)
			pr.mu.Unlock()
			for old := pr.last.Load(); idx > old && !pr.last.CompareAndSwap(old, idx); old = pr.last.Load() {
			}
			return nil
		}
		if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrLeadershipLost) || try == 10 {
			return err
		}
		pr.retries.Add(1)
		lead := pr.leader()
		pr.cur.CompareAndSwap(l, &lead)
	}
}

// run proposes n commands (or, with n 0, until the load has made opens
// OPENs) from p goroutines and returns the last index committed.
func (pr *proposer) run(tb testing.TB, n int, opens uint64, p int) uint64 {
	tb.Helper()
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	var emu sync.Mutex
	var errs []error
	for range p {
		wg.Go(func() {
			for n == 0 || left.Add(-1) >= 0 {
				b, ok := pr.next(opens)
				if !ok {
					return
				}
				if err := pr.propose(b); err != nil {
					emu.Lock()
					errs = append(errs, err)
					emu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("propose: %v", err)
	}
	return pr.last.Load()
}

// bytesIn returns the command bytes proposed at indexes first..last, and
// how many of those indexes are raft's own entries (not proposed here).
func (pr *proposer) bytesIn(first, last uint64) (n, others int) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for i := first; i <= last; i++ {
		if s, ok := pr.sizes[i]; ok {
			n += s
		} else {
			others++
		}
	}
	return n, others
}
