package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/sluice-rtm/sluice/cluster"
	"github.com/sluice-rtm/sluice/wire"
)

// The engine's side of the cluster's node links (package cluster owns
// them): enrolling a dialed link in an event loop (cluster.Transport), the
// loop's handle on it (cluster.Conn), and the loop reading its frames. And
// the gateway as the cluster sees it (cluster.Gateway).

// transport implements cluster.Transport with the server's event loops.
type transport struct{ s *Server }

// Enroll registers c with gnet (Engine.Register), which picks a loop;
// the loop's OnOpen attaches lk.
func (t transport) Enroll(c net.Conn, lk *cluster.Link, deadline time.Time) error {
	srv := t.s
	tm := time.NewTimer(time.Until(deadline))
	defer tm.Stop()
	select {
	case <-srv.loopsUp:
	case <-tm.C:
		return errors.New("event loops not running")
	}
	ctx := gnet.NewNetConnContext(context.Background(), c)
	ctx = gnet.NewContext(ctx, lk)
	res, err := srv.eng.Register(ctx)
	if err != nil {
		return err
	}
	// gnet duplicates the descriptor and closes c itself.
	if rr := <-res; rr.Err != nil {
		return rr.Err
	}
	return nil
}

// linkConn is a link's connection as the cluster sees it.
type linkConn struct{ c *conn }

// Kick drains the link's queue into the connection's output on its loop.
func (lc linkConn) Kick() {
	c := lc.c
	c.l.execute(func() {
		c.link.Drain(func(b []byte) {
			if c.closed || c.closing {
				return
			}
			s, k := c.ownStart()
			c.scratch = append(c.scratch, b...)
			c.ownEnd(s, k)
		})
	})
}

// Close closes the connection on its loop once its output is written.
func (lc linkConn) Close() {
	c := lc.c
	c.l.execute(func() { closeLink(c) })
}

// closeLink marks a link's connection closing (on its loop).
func closeLink(c *conn) {
	if !c.closed && !c.closing {
		c.closing = true
		c.l.closeAfterFlush = append(c.l.closeAfterFlush, c)
	}
}

// failLink ends a link from its loop and closes its connection.
func failLink(c *conn, err error) {
	c.link.Closed(err)
	closeLink(c)
}

// linkTraffic is OnTraffic for a link's connection: answers and feeds
// from the peer, handed to the link on the loop.
func (l *loop) linkTraffic(c *conn) {
	lk := c.link
	buf, _ := c.gc.Peek(-1)
	off := 0
	for !c.closing && !c.closed {
		h, body, n, err := wire.Split(buf[off:], l.srv.peerMaxBody)
		if err == wire.ErrIncomplete {
			break
		}
		if err != nil {
			failLink(c, fmt.Errorf("%w: %s: %v", cluster.ErrLinkDown, lk.Node(), err))
			break
		}
		off += n
		if body, err = l.inflateFeed(h, body); err != nil {
			failLink(c, fmt.Errorf("%w: %s: %v", cluster.ErrLinkDown, lk.Node(), err))
			break
		}
		if err := lk.Receive(h, body); err != nil {
			failLink(c, err)
			break
		}
	}
	if c.closing || c.closed {
		off = len(buf)
	}
	l.stats.bytesIn += uint64(off)
	if off > 0 {
		_, _ = c.gc.Discard(off) // never 0: see loop.traffic
	}
}

// clusterGateway is the gateway as the cluster sees it.
type clusterGateway struct{ s *Server }

func (g clusterGateway) Changed(channel string) { g.s.gw.changed(channel) }
func (g clusterGateway) HostDown(node string)   { g.s.mirrors.hostDown(node) }
func (g clusterGateway) Feed(f wire.NodeFeed, stamps, run []byte) {
	g.s.mirrors.feed(f, stamps, run)
}
func (g clusterGateway) SetNodes(addrs []string) { g.s.setNodes(addrs) }
func (g clusterGateway) Conns() int              { return int(g.s.conns.Load()) }

// CutOff sends every client connection GOAWAY: the node lost the
// majority of its cluster (cluster/quorum.go).
func (g clusterGateway) CutOff() {
	for _, l := range g.s.loopList() {
		l.execute(l.goAwayCutOff)
	}
}
