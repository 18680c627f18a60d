package nodelink

import (
	"fmt"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// Link heartbeats. Every outbound link sends a PING each heartbeat
// interval (a quarter of the RPC timeout); the peer answers PONG (9.2).
// A link on which nothing at all arrived for two RPC timeouts is dead:
// it is closed, which fails everything in flight on it (NODE_APPENDs and
// requests alike) and tells the Handler the peer is down (the cluster then
// gives it no new streamlet for a while, and this node's copies fed by it
// end and are read again). Without it a paused or cut-off host held a
// gateway's NODE_APPEND, and the copies it fed, forever: nothing else
// bounds them.
//
// Requests are not what declares a peer dead: a slow answer (a manager
// waiting for a host on behalf of the caller) fails only that request,
// after CallTimeout.

// heartbeatEvery is the interval of link PINGs and checks.
func (ls *Links) heartbeatEvery() time.Duration { return max(ls.RPCTimeout()/4, 10*time.Millisecond) }

// silenceLimit is how long a link may receive nothing before it is
// dead: two RPC timeouts (a peer's PONG waits behind everything its loop
// has to do, and so does this node's reading of it).
func (ls *Links) silenceLimit() time.Duration { return 2 * ls.RPCTimeout() }

// linkDead is the heartbeat's verdict on a link at now (unix ns): dead
// when nothing arrived from the peer since lastRecv for longer than
// timeout.
func linkDead(now, lastRecv int64, timeout time.Duration) bool {
	return now-lastRecv > int64(timeout)
}

// heartbeats runs heartbeat every heartbeatEvery until the node stops
// (its own goroutine: the redial may wait for peers).
func (ls *Links) heartbeats() {
	t := time.NewTicker(ls.heartbeatEvery())
	defer t.Stop()
	for {
		select {
		case <-ls.cfg.Stop:
			return
		case <-t.C:
			ls.heartbeat(ls.now())
		}
	}
}

// heartbeatPaused reports whether the heartbeat itself ran late by more
// than timeout (this process was paused or starved): then silence from
// the peers says nothing about them, and their links get a fresh timeout
// instead of being declared dead.
func heartbeatPaused(now, lastTick int64, timeout time.Duration) bool {
	return lastTick != 0 && now-lastTick > int64(timeout)
}

// heartbeat checks every link and pings the live ones; it dials the
// members that are alive in the membership but were unreachable.
func (ls *Links) heartbeat(now time.Time) {
	paused := heartbeatPaused(now.UnixNano(), ls.lastBeat, ls.RPCTimeout())
	ls.lastBeat = now.UnixNano()
	ls.redial()
	ls.cfg.Handler.Heartbeat(now.UnixNano(), paused)
	ls.mu.RLock()
	links := make([]*Link, 0, len(ls.links))
	for _, l := range ls.links {
		links = append(links, l)
	}
	ls.mu.RUnlock()
	timeout := ls.silenceLimit()
	for _, l := range links {
		if l.closed() {
			continue
		}
		if paused {
			l.lastRecv.Store(now.UnixNano())
		} else if linkDead(now.UnixNano(), l.lastRecv.Load(), timeout) {
			l.close(fmt.Errorf("%w: %s: nothing received for %v (heartbeat)", ErrLinkDown, l.node, timeout), false)
			continue
		}
		_ = l.Send(wire.AppendPing(nil, 0))
	}
}

// redial dials, in the background and one at a time, the alive members
// that this node could not reach.
func (ls *Links) redial() {
	if !ls.redialing.CompareAndSwap(false, true) {
		return
	}
	todo := ls.cfg.Directory.Unreached()
	if len(todo) == 0 {
		ls.redialing.Store(false)
		return
	}
	ls.wg.Add(1)
	ls.owned.Go(func() {
		defer ls.redialing.Store(false)
		for _, name := range todo {
			if ls.stopping() {
				return
			}
			ls.linkTo(name, true)
		}
	}, ls.wg.Done)
}
