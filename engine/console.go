package engine

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-rtm/sluice/console"
)

// The web console's view of the server (package console serves it on
// the HTTP listener).
//
// Channel rates are measured at this node's gateway: while a console
// polls (consoleWindow), every loop counts the publishes it stores per
// channel (loopChan.pubMsgs/pubBytes); a collection takes and resets the
// counts (one task per loop) and divides by the time since the previous
// collection. Collections are at least consoleMinInterval apart:
// requests in between get the last result, so any number of open
// consoles share one measurement. The first collection after a pause
// starts the measurement (its rates cover only what it saw counted).

// consoleMinInterval is the shortest time between two collections.
const consoleMinInterval = time.Second

// consoleWindow: the loops count publishes per channel while a console
// collected within this time, and only then. A channel view with
// uncollected counts is kept until the next collection, so the views
// held for the console are those of channels published to between two
// collections.
const consoleWindow = 10 * time.Second

// consoleSrc implements console.Source for a Server.
type consoleSrc struct {
	s *Server

	mu     sync.Mutex // serialises collections; guards the fields below
	last   time.Time  // when the counts were last taken
	cached console.Status
	valid  bool
}

func (s *Server) consoleSource() *consoleSrc {
	return &consoleSrc{s: s, last: s.clock()}
}

func (cs *consoleSrc) Node() string { return cs.s.opts.ServerName }

func (cs *consoleSrc) WSAddr() (string, bool) { return cs.s.wsAddr, cs.s.wsTLS }

// AuthRequired: a client without a token is refused (auth on, and no
// anonymous role).
func (cs *consoleSrc) AuthRequired() bool {
	st := cs.s.auth.Load()
	return st != nil && st.anon == nil
}

// Authorize accepts any token the server's auth accepts (as in HELLO: a
// static token or a valid JWT; no token means the anonymous role if there
// is one); the caller sees the channels it may subscribe to.
func (cs *consoleSrc) Authorize(token []byte, hasToken bool) (func(string) bool, error) {
	st := cs.s.auth.Load()
	if st == nil {
		return nil, nil
	}
	var p *principal
	if hasToken && st.jwt != nil && looksLikeJWT(token) {
		if cj, _, err := verifyJWT(st.jwt, token, cs.s.clock()); err == nil {
			p = cj.principal(st.jwt)
		}
	} else {
		var h [32]byte
		if hasToken {
			h = sha256.Sum256(token)
		}
		p = st.lookup(hasToken, &h)
	}
	if p == nil {
		return nil, fmt.Errorf("%w", console.ErrUnauthorized)
	}
	return func(ch string) bool { return matchAny(p.caps[capSubscribe], []byte(ch)) }, nil
}

// chanSample is one loop's counts for one channel.
type chanSample struct {
	name        string
	msgs, bytes uint64
	subs        int
}

// loopSample is what a collection takes from one loop.
type loopSample struct {
	chans []chanSample
	conns int64
}

// Status collects (or returns the last collection, when it is recent).
func (cs *consoleSrc) Status(ctx context.Context) (console.Status, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	s := cs.s
	now := s.clock()
	if cs.valid && now.Sub(cs.last) < consoleMinInterval {
		return cs.cached, nil
	}
	s.consoleLast.Store(now.UnixNano())
	ls := s.loopList()
	ch := make(chan loopSample, len(ls))
	sent := 0
	for _, l := range ls {
		err := l.el.Execute(ctx, task{l, func() {
			var smp loopSample
			l.countPubs = true
			for _, lc := range l.chans {
				if lc.pubMsgs > 0 || lc.nsubs > 0 {
					smp.chans = append(smp.chans, chanSample{lc.name, lc.pubMsgs, lc.pubBytes, lc.nsubs})
				}
				lc.pubMsgs, lc.pubBytes = 0, 0
			}
			for c := range l.conns {
				if !c.closed && c.node == nil {
					smp.conns++
				}
			}
			ch <- smp
		}})
		if err == nil {
			sent++
		}
	}
	agg := make(map[string]*console.Channel)
	var conns int64
	var msgs, bytes uint64
	for range sent {
		select {
		case smp := <-ch:
			conns += smp.conns
			for _, c := range smp.chans {
				a := agg[c.name]
				if a == nil {
					a = &console.Channel{Name: c.name}
					agg[c.name] = a
				}
				a.MsgsPerSec += float64(c.msgs)
				a.BytesPerSec += float64(c.bytes)
				a.Subscribers += int64(c.subs)
				msgs += c.msgs
				bytes += c.bytes
			}
		case <-ctx.Done():
			return console.Status{}, ctx.Err()
		}
	}
	secs := max(now.Sub(cs.last).Seconds(), 1e-3)
	st := console.Status{Node: s.opts.ServerName}
	for _, a := range agg {
		a.MsgsPerSec /= secs
		a.BytesPerSec /= secs
		st.Channels = append(st.Channels, *a)
	}
	st.Members = s.plane.members(console.Member{Name: s.opts.ServerName, Addr: s.addr, State: "alive", Load: console.Load{
		Streamlets: s.host.Load().Hosted, Channels: int64(s.mgr.Channels()), Connections: conns,
		MsgsInPerSec: float64(msgs) / secs, BytesInPerSec: float64(bytes) / secs,
	}})
	cs.last, cs.cached, cs.valid = now, st, true
	return st, nil
}
