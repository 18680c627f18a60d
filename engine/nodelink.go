package engine

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/sluice-rtm/sluice/cluster"
	"github.com/sluice-rtm/sluice/cluster/nodelink"
	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/ringbuf"
)

// The engine's side of node connections (package cluster/nodelink owns
// them and the transport's frames, package cluster the meaning of the
// rest): enrolling a dialed link in an event loop (nodelink.Transport),
// the loop's handle on a node connection of either direction
// (nodelink.Conn, and cluster.Conn for an inbound one's data plane:
// nodeCarrier), and the gateway as the cluster sees it (cluster.Gateway).
// A loop carries a node connection's bytes: what it reads goes to the
// connection's nodelink.NodeConn (loop.traffic), what it writes goes
// through NodeConn.Write (conn.flush).

// transport implements nodelink.Transport with the server's event loops.
type transport struct{ s *Server }

// Enroll registers c with gnet (Engine.Register), which picks a loop;
// the loop's OnOpen attaches e.
func (t transport) Enroll(c net.Conn, e nodelink.Enrolled, deadline time.Time) error {
	srv := t.s
	tm := time.NewTimer(time.Until(deadline))
	defer tm.Stop()
	select {
	case <-srv.loopsUp:
	case <-tm.C:
		return errors.New("event loops not running")
	}
	ctx := gnet.NewNetConnContext(context.Background(), c)
	ctx = gnet.NewContext(ctx, e)
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

// nodeCarrier is a node connection as the cluster sees it (cluster.Conn,
// a nodelink.Conn): the same conn, with the methods the cluster may call.
// Every method but Execute runs on the connection's loop.
type nodeCarrier conn

var _ cluster.Conn = (*nodeCarrier)(nil)

func (n *nodeCarrier) c() *conn { return (*conn)(n) }

func (n *nodeCarrier) OwnStart() []byte {
	c := n.c()
	c.nodeOwn, c.nodeOwnCap = c.ownStart()
	return c.scratch
}

func (n *nodeCarrier) OwnEnd(b []byte) {
	c := n.c()
	c.scratch = b
	c.ownEnd(c.nodeOwn, c.nodeOwnCap)
}

// Share queues b without copying; a connection with more vectors than
// one writev takes is written first.
func (n *nodeCarrier) Share(b []byte) {
	c := n.c()
	if len(c.iov) >= maxIov {
		c.flush()
	}
	c.shared(b)
}

func (n *nodeCarrier) Hold(b *ringbuf.Buffer) { n.l.held = append(n.l.held, b) }
func (n *nodeCarrier) Flush()                 { n.c().flush() }
func (n *nodeCarrier) Outbound() int          { return n.c().outbound() }
func (n *nodeCarrier) Close()                 { closeNode(n.c()) }
func (n *nodeCarrier) Execute(fn func())      { n.l.execute(fn) }
func (n *nodeCarrier) Now() int64             { return n.l.now }
func (n *nodeCarrier) RemoteAddr() string     { return addrString(n.gc.RemoteAddr()) }
func (n *nodeCarrier) CountOut(k int)         { n.l.stats.msgsOut += uint64(k) }

// AppendBatch appends a peer gateway's batch to the hosted streamlet s on
// this loop, as flushRun does the loop's own publishes, and wakes the
// channel's readers of this node.
func (n *nodeCarrier) AppendBatch(s *host.Streamlet, payloads [][]byte, exts []bool, pos []uint64, dup []bool) int {
	l := n.l
	k := s.AppendBatchExt(payloads, exts, pos, dup, l.now)
	stored := 0
	for i := range k {
		if !dup[i] {
			stored++
		}
	}
	if stored > 0 {
		l.stats.msgsIn += uint64(stored)
		if gc := l.srv.gw.lookup(s.Channel()); gc != nil {
			gc.notify(l)
		}
	}
	return k
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// closeNode marks a node connection closing (on its loop): it is closed
// once its output is written.
func closeNode(c *conn) {
	if !c.closed && !c.closing {
		c.closing = true
		c.l.closeAfterFlush = append(c.l.closeAfterFlush, c)
	}
}

// nodeTraffic is OnTraffic for a node connection: the bytes go to its
// protocol (package cluster).
func (l *loop) nodeTraffic(c *conn) {
	raw, _ := c.gc.Peek(-1)
	n := c.node.Input(raw)
	if c.closing || c.closed {
		n = len(raw)
	}
	l.stats.bytesIn += uint64(n)
	if n > 0 {
		_, _ = c.gc.Discard(n) // never 0: see loop.traffic
	}
}

// clusterGateway is the gateway as the cluster sees it.
type clusterGateway struct{ s *Server }

func (g clusterGateway) Changed(channel string)         { g.s.gw.changed(channel) }
func (g clusterGateway) HostDown(node string)           { g.s.mirrors.hostDown(node) }
func (g clusterGateway) Copy(id uint64) *host.Streamlet { return g.s.mirrors.existing(id) }
func (g clusterGateway) Wake(channel string)            { g.s.gw.wake(channel) }
func (g clusterGateway) SetNodes(addrs []string)        { g.s.setNodes(addrs) }
func (g clusterGateway) Conns() int                     { return int(g.s.conns.Load()) }

// CutOff sends every client connection GOAWAY: the node has known no
// leader of the metadata log for long (a minority side).
func (g clusterGateway) CutOff() {
	for _, l := range g.s.loopList() {
		l.execute(l.goAwayCutOff)
	}
}
