package cluster

import (
	"fmt"
	"net"
	"time"

	"github.com/sluice-rtm/sluice/cluster"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// Probe is a node-to-node connection (PROTOCOL.md 9) to one node of a
// cluster without a secret, used read-only: it sends only LIST (the
// streamlets of a channel the node hosts), which changes no state. (INFO is
// not read-only: a node that does not know the channel rebuilds it from the
// hosts and seals its open streamlet; see bench-cluster.md.) One goroutine
// at a time.
type Probe struct {
	node    string
	addr    string
	name    string
	broken  bool // the last call failed: redial before the next
	conn    net.Conn
	sc      *wire.SealedConn // conn's record layer after the handshake
	r       *wire.Reader
	id      uint32
	buf     []byte
	timeout time.Duration
}

// probeMaxBody bounds a probe answer: a LIST of 65,535 entries fits.
const probeMaxBody = 8 << 20

// DialProbe connects to the node at addr (its client address) as a peer
// named name and completes the node handshake; node is the name the node
// must answer with.
func DialProbe(addr, node, name string, timeout time.Duration) (*Probe, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %v", ErrProbe, addr, err)
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	sess, err := wire.NodeHandshake(c, wire.NodeDial{Name: name, Expect: node})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrProbe, node, err)
	}
	sc := sess.Conn(c)
	p := &Probe{node: node, addr: addr, name: name, conn: c, sc: sc, r: wire.NewReader(sc, probeMaxBody), timeout: timeout}
	return p, nil
}

// call sends one NODE_REQUEST and returns the OK result, valid until the
// next call. After a failed call (a timeout leaves the stream mid-frame)
// the next call dials again.
func (p *Probe) call(op wire.NodeOp, body []byte) ([]byte, error) {
	if p.broken {
		q, err := DialProbe(p.addr, p.node, p.name, p.timeout)
		if err != nil {
			return nil, err
		}
		*p = *q
	}
	res, err := p.roundTrip(op, body)
	if err != nil {
		p.broken = true
		_ = p.conn.Close()
	}
	return res, err
}

func (p *Probe) roundTrip(op wire.NodeOp, body []byte) ([]byte, error) {
	p.id++
	if p.id == 0 {
		p.id = 1
	}
	_ = p.conn.SetDeadline(time.Now().Add(p.timeout))
	p.buf = wire.AppendNodeRequest(p.buf[:0], p.id, op, body)
	if _, err := p.sc.Write(p.buf); err != nil {
		return nil, fmt.Errorf("%w: %s: %v: %v", ErrProbe, p.node, op, err)
	}
	for {
		h, b, err := p.r.Next()
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v: %v", ErrProbe, p.node, op, err)
		}
		if h.Type == wire.TypePing {
			continue
		}
		if h.Type != wire.TypeNodeResponse || h.ID != p.id {
			return nil, fmt.Errorf("%w: %s: %v answered by %v id %d", ErrProbe, p.node, op, h.Type, h.ID)
		}
		status, res, text, err := wire.DecodeNodeResponse(b)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v: %v", ErrProbe, p.node, op, err)
		}
		if status != wire.NodeOK {
			return nil, fmt.Errorf("%w: %s: %v: status %d: %s", ErrProbe, p.node, op, status, text)
		}
		return res, nil
	}
}

// List returns the streamlets of channel that the node hosts (LIST).
func (p *Probe) List(channel string) ([]role.Hosted, error) {
	var e wire.NodeEnc
	e.Str8(channel)
	b, err := p.call(wire.OpList, e.B)
	if err != nil {
		return nil, err
	}
	hs, err := cluster.DecodeHosted(b, p.node)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: LIST: %v", ErrProbe, p.node, err)
	}
	return hs, nil
}

// Close closes the connection.
func (p *Probe) Close() error { return p.conn.Close() }

// Probes holds one Probe per node of a cluster, parallel to Nodes.Servers.
type Probes []*Probe

// DialProbes opens a Probe to every node of ns.
func DialProbes(ns *Nodes) (Probes, error) {
	var ps Probes
	for i, s := range ns.Servers {
		p, err := DialProbe(s.Addr(), ns.Names[i], "clusterbench-probe", 5*time.Second)
		if err != nil {
			ps.Close()
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// Placement is where one channel lives: its manager (computed, see
// ManagerOf) and, per node, the streamlets it hosts and the messages they
// hold.
type Placement struct {
	Manager    string
	Streamlets map[string]int
	Msgs       map[string]int64
}

// Place lists channel's streamlets on every node; mgr is its manager
// (ManagerOf).
func (ps Probes) Place(channel, mgr string) (Placement, error) {
	pl := Placement{Manager: mgr, Streamlets: map[string]int{}, Msgs: map[string]int64{}}
	for _, p := range ps {
		hs, err := p.List(channel)
		if err != nil {
			return pl, err
		}
		pl.Streamlets[p.node] += len(hs)
		for _, h := range hs {
			pl.Msgs[p.node] += int64(h.Len)
		}
	}
	return pl, nil
}

// Close closes every probe.
func (ps Probes) Close() {
	for _, p := range ps {
		_ = p.Close()
	}
}
