package engine

import (
	"context"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// drainPoll is how often a draining node asks whether what it holds is
// safe elsewhere; clientsGrace is how long it waits for its clients to
// leave after GOAWAY once that is so (the SDK leaves within its own 2 s
// GOAWAY grace; Shutdown closes the rest).
const (
	drainPoll    = 100 * time.Millisecond
	clientsGrace = 5 * time.Second
)

// Drain puts a cluster node in lame-duck mode and returns when it can go
// without loss (DESIGN.md, "Drain and copies"), or with ctx's error when
// ctx ends first. The node gossips that it drains, so no node chooses it
// as a host or a manager; its host seals its open streamlets and takes no
// new ones (their writers continue on other nodes); its clients get
// GOAWAY SHUTTING_DOWN and new ones are refused, so they resume on other
// nodes; the managers copy the streamlets it holds to other nodes. Drain
// returns nil once every streamlet it holds is listed with another
// holder (or expired) and its clients are gone, or at once when no other
// node can take anything. On a single node it returns nil at once: the
// shutdown is the one of today. Call Shutdown after it. Safe to call from
// any goroutine but a loop, once.
func (s *Server) Drain(ctx context.Context) error {
	if !s.draining.CompareAndSwap(false, true) {
		return nil
	}
	if !s.plane.startDrain() {
		s.draining.Store(false) // a single node: nothing to drain to
		return nil
	}
	start := time.Now()
	sealed := s.host.SetDraining()
	for _, l := range s.loopList() {
		l.execute(l.goAwayDrain)
	}
	s.log.Info("sluice draining", "sealed", sealed)
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	var safeAt time.Time
	for {
		left, noTarget := s.plane.drainLeft()
		if noTarget {
			s.log.Warn("sluice draining: no other live node can take what this node holds; it goes with it")
			return nil
		}
		clients := s.clientConns(ctx)
		if left == 0 {
			if safeAt.IsZero() {
				safeAt = time.Now()
			}
			if clients == 0 || time.Since(safeAt) >= clientsGrace {
				s.log.Info("sluice drained", "took", time.Since(start).Round(time.Millisecond), "clients_left", clients)
				return nil
			}
		} else {
			safeAt = time.Time{}
		}
		select {
		case <-ctx.Done():
			s.log.Warn("sluice draining: timed out", "streamlets_held_nowhere_else", left, "clients", clients)
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Draining reports whether Drain was called.
func (s *Server) Draining() bool { return s.draining.Load() }

// DrainRequested is signalled when the cluster asks this node to drain
// (`sluice cluster drain`); nil on a single node (never ready).
func (s *Server) DrainRequested() <-chan struct{} { return s.plane.drainRequested() }

// clientConns counts the client connections open on every loop.
func (s *Server) clientConns(ctx context.Context) int {
	ls := s.loopList()
	ch := make(chan int, len(ls))
	sent := 0
	for _, l := range ls {
		if l.el.Execute(ctx, task{l, func() {
			n := 0
			for c := range l.conns {
				if c.node == nil && !c.closed {
					n++
				}
			}
			ch <- n
		}}) == nil {
			sent++
		}
	}
	total := 0
	for range sent {
		select {
		case n := <-ch:
			total += n
		case <-ctx.Done():
			return total
		}
	}
	return total
}

// goAwayDrain sends every client GOAWAY SHUTTING_DOWN: the node drains,
// and its clients resume on other nodes (the addresses WELCOME listed).
func (l *loop) goAwayDrain() {
	for c := range l.conns {
		if c.closing || c.closed || c.node != nil || !c.hello {
			continue
		}
		s, k := c.ownStart()
		c.scratch = wire.AppendGoAway(c.scratch, wire.GoAway{Code: wire.CodeShuttingDown,
			Text: "this node drains: connect to another node"})
		c.ownEnd(s, k)
	}
}
