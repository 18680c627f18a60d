package presence

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/internal/owned"
	"github.com/sluice-rtm/sluice/wire"
)

// Caller sends one push body to a node and returns its result: in
// production a NODE_REQUEST with op wire.OpPresenceSync over the
// cluster's link to node (bounded by the link's request timeout), in
// tests an in-memory hop to another Registry. It is called from the
// Syncer's goroutines only, one call at a time per node.
type Caller func(node string, body []byte) (result []byte, err error)

// Backoff of a sender whose push got no answer.
const (
	retryMin = 50 * time.Millisecond
	retryMax = 2 * time.Second
)

// Syncer pushes a Registry's local part to every live peer: one goroutine
// per peer, one push in flight at a time (stop and wait), woken when a
// local change was recorded. Its methods are safe for concurrent use.
type Syncer struct {
	r    *Registry
	call Caller

	mu      sync.Mutex
	senders map[string]*sender
	// list is senders' values, for kickAll, which the Registry calls
	// while SetPeers holds mu.
	list   atomic.Pointer[[]*sender]
	closed bool
	wg     sync.WaitGroup
	owned  owned.Count
}

type sender struct {
	wake chan struct{} // cap 1
	stop chan struct{}
}

// NewSyncer returns a Syncer of r that sends with call. It starts no
// goroutine until SetPeers names peers.
func NewSyncer(r *Registry, call Caller) *Syncer {
	s := &Syncer{r: r, call: call, senders: make(map[string]*sender)}
	r.mu.Lock()
	r.kick = s.kickAll
	r.mu.Unlock()
	return s
}

// SetPeers sets the cluster's live members (Registry.Peers): senders
// start for new peers (with a snapshot) and stop for peers that went,
// whose part of the picture is dropped.
func (s *Syncer) SetPeers(alive []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	added, gone := s.r.Peers(alive)
	for _, n := range gone {
		if sd := s.senders[n]; sd != nil {
			close(sd.stop)
			delete(s.senders, n)
		}
	}
	for _, n := range added {
		sd := &sender{wake: make(chan struct{}, 1), stop: make(chan struct{})}
		s.senders[n] = sd
		s.wg.Add(1)
		s.owned.Go(func() { s.run(n, sd) }, s.wg.Done)
		sd.poke()
	}
	s.publish()
}

// publish copies senders into list. s.mu is held.
func (s *Syncer) publish() {
	l := make([]*sender, 0, len(s.senders))
	for _, sd := range s.senders {
		l = append(l, sd)
	}
	s.list.Store(&l)
}

func (sd *sender) poke() {
	select {
	case sd.wake <- struct{}{}:
	default:
	}
}

// kickAll wakes every sender: a local change was recorded for them all.
func (s *Syncer) kickAll() {
	if l := s.list.Load(); l != nil {
		for _, sd := range *l {
			sd.poke()
		}
	}
}

// run is one peer's sender: it sends what NextPush gives until nothing
// is due, then waits for a wake; a push without an answer is sent again
// after a backoff (50 ms doubling to 2 s).
func (s *Syncer) run(peer string, sd *sender) {
	delay := time.Duration(0)
	for {
		select {
		case <-sd.stop:
			return
		case <-sd.wake:
		}
		for {
			body := s.r.NextPush(peer)
			if body == nil {
				break
			}
			res, err := s.call(peer, body)
			var st uint8
			var inc uint64
			if err == nil {
				st, inc, err = wire.DecodeSyncResult(res)
			}
			s.r.Done(peer, st, inc, err)
			if err == nil {
				delay = 0
				continue
			}
			delay = min(max(2*delay, retryMin), retryMax)
			t := time.NewTimer(delay)
			select {
			case <-sd.stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// Close stops every sender and waits for them; no push is sent after it
// returns.
func (s *Syncer) Close() {
	s.mu.Lock()
	s.closed = true
	for n, sd := range s.senders {
		close(sd.stop)
		delete(s.senders, n)
	}
	s.publish()
	s.mu.Unlock()
	s.wg.Wait()
}

// Goroutines returns how many of the Syncer's goroutines run (0 once
// Close returned).
func (s *Syncer) Goroutines() int { return s.owned.Running() }

// Serve answers a push from peer (the body of its NODE_REQUEST with op
// wire.OpPresenceSync): the result to send back, or an error for the
// node's answer (wire.NodeBadOp for a malformed body: errBadOp; else
// FAILED).
func (r *Registry) Serve(peer string, body []byte) ([]byte, error) {
	p, items, err := wire.DecodePresenceSync(body, nil)
	if err != nil {
		return nil, &BadPushError{err}
	}
	st, err := r.Apply(peer, p, items)
	if err != nil {
		return nil, err
	}
	return wire.AppendSyncResult(nil, st, r.inc), nil
}

// BadPushError is Serve's error for a push body that breaks its layout
// (the node answers BAD_OP).
type BadPushError struct{ Err error }

func (e *BadPushError) Error() string { return e.Err.Error() }
func (e *BadPushError) Unwrap() error { return e.Err }
