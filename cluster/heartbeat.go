package cluster

import (
	"fmt"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// Link heartbeats. Every outbound link sends a PING each heartbeat
// interval (a quarter of the RPC timeout); the peer answers PONG (9.2).
// A link on which nothing at all arrived for two RPC timeouts is dead:
// it is closed, which fails everything in flight on it (NODE_APPENDs and
// requests alike) and marks the peer down, so that it gets no new
// streamlet for a while and this node's copies fed by it end and are read
// again. Without it a paused or cut-off host held a
// gateway's NODE_APPEND, and the copies it fed, forever: nothing else
// bounds them.
//
// Requests are no longer what declares a peer dead: a slow answer (a
// manager waiting for a host on behalf of the caller) fails only that
// request, after callTimeout.

// heartbeatEvery is the interval of link PINGs and checks.
func (c *Cluster) heartbeatEvery() time.Duration { return max(c.rpcTimeout()/4, 10*time.Millisecond) }

// callTimeout bounds the wait for one request's answer: long enough for
// the nested requests one operation makes (a WRITE_GRANT may seal on one
// host and open on another, each within the RPC timeout), since a peer's
// death is the heartbeat's to detect.
func (c *Cluster) callTimeout() time.Duration { return 3 * c.rpcTimeout() }

// StaleAfter is how long a gateway's read stream may stand still before
// it looks at its channel's list and the open streamlet's length again
// (two RPC timeouts; package engine, progress.go).
func (c *Cluster) StaleAfter() time.Duration { return 2 * c.rpcTimeout() }

// silenceLimit is how long a link may receive nothing before it is
// dead: two RPC timeouts (a peer's PONG waits behind everything its loop
// has to do, and so does this node's reading of it).
func (c *Cluster) silenceLimit() time.Duration { return 2 * c.rpcTimeout() }

// linkDead is the heartbeat's verdict on a link at now (unix ns): dead
// when nothing arrived from the peer since lastRecv for longer than
// timeout.
func linkDead(now, lastRecv int64, timeout time.Duration) bool {
	return now-lastRecv > int64(timeout)
}

// heartbeats runs heartbeat every heartbeatEvery until the cluster
// stops (its own goroutine: refresh may wait for peers).
func (c *Cluster) heartbeats() {
	t := time.NewTicker(c.heartbeatEvery())
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.heartbeat(c.now())
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
func (c *Cluster) heartbeat(now time.Time) {
	paused := heartbeatPaused(now.UnixNano(), c.lastBeat, c.rpcTimeout())
	c.lastBeat = now.UnixNano()
	c.redial()
	c.nudgeSenders(now.UnixNano(), paused)
	c.mu.RLock()
	links := make([]*Link, 0, len(c.links))
	for _, l := range c.links {
		links = append(links, l)
	}
	c.mu.RUnlock()
	timeout := c.silenceLimit()
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
		_ = l.send(wire.AppendPing(nil, 0))
	}
}

// redial dials, in the background and one at a time, the alive members
// that this node could not reach.
func (c *Cluster) redial() {
	if !c.redialing.CompareAndSwap(false, true) {
		return
	}
	todo := c.view.Unreached()
	if len(todo) == 0 {
		c.redialing.Store(false)
		return
	}
	c.wg.Add(1)
	c.owned.Go(func() {
		defer c.redialing.Store(false)
		for _, name := range todo {
			select {
			case <-c.stop:
				return
			default:
			}
			c.linkTo(name, true)
		}
	}, c.wg.Done)
}
