package cluster

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// Serving peers' NODE_REQUESTs (PROTOCOL.md 9.4): one handler per op,
// each decoding its body with the sticky-error decoder and checking it
// whole before acting. Leader ops (the manager's) are answered NOT_LEADER
// by a node that does not lead the metadata log; the asker tries the
// leader it learns next.

// handler serves one op: it decodes from d (checked by serve once it
// returns) and returns the result or an error.
type handler struct {
	leader bool
	serve  func(c *Cluster, peer string, d *wire.NodeDec, size int) ([]byte, error)
}

var handlers = map[wire.NodeOp]handler{
	wire.OpWriteGrant:  {leader: true, serve: (*Cluster).serveWriteGrant},
	wire.OpCreate:      {leader: true, serve: (*Cluster).serveCreate},
	wire.OpInterest:    {leader: true, serve: (*Cluster).serveInterest},
	wire.OpExpire:      {leader: true, serve: (*Cluster).serveExpire},
	wire.OpUnreachable: {leader: true, serve: (*Cluster).serveUnreachableOp},
	wire.OpHost:        {serve: (*Cluster).serveHost},
	wire.OpSeal:        {serve: (*Cluster).serveSeal},
	wire.OpFree:        {serve: (*Cluster).serveFree},
	wire.OpList:        {serve: (*Cluster).serveList},
	wire.OpLen:         {serve: (*Cluster).serveLen},
	wire.OpFence:       {serve: (*Cluster).serveFence},
	wire.OpSealAt:      {serve: (*Cluster).serveSealAt},
	wire.OpDedupIDs:    {serve: (*Cluster).serveDedupIDs},
	wire.OpCopy:        {serve: (*Cluster).serveCopy},
	wire.OpDrain:       {serve: (*Cluster).serveDrainOp},
	wire.OpStatus:      {serve: (*Cluster).serveStatus},
}

// serve executes one NODE_REQUEST from peer node and returns the status
// and result body (nodelink.Handler). It may wait for other nodes: call
// it off the loops.
func (c *Cluster) serve(peer string, op wire.NodeOp, body []byte) (uint8, []byte, string) {
	if op >= wire.OpServiceFirst {
		return c.serveService(peer, op, body)
	}
	h, ok := handlers[op]
	if !ok {
		return wire.NodeBadOp, nil, fmt.Sprintf("unknown op %d", op)
	}
	if h.leader && !c.mgr.Leading() {
		return wire.NodeNotLeader, nil, "this node does not lead the metadata log"
	}
	d := wire.NewNodeDec(wire.TypeNodeRequest, body)
	res, err := h.serve(c, peer, d, len(body))
	if derr := d.Err(); derr != nil {
		return wire.NodeBadOp, nil, derr.Error()
	}
	if err != nil {
		return statusOf(err)
	}
	return wire.NodeOK, res, ""
}

// statusOf maps an operation's error to its NODE_RESPONSE status.
func statusOf(err error) (uint8, []byte, string) {
	if oe, isOp := errors.AsType[*opError](err); isOp {
		return oe.status, nil, oe.text
	}
	switch {
	case errors.Is(err, errBadBody):
		return wire.NodeBadOp, nil, err.Error()
	case errors.Is(err, role.ErrUnknownStreamlet):
		return wire.NodeUnknown, nil, err.Error()
	case errors.Is(err, role.ErrNotLeader):
		return wire.NodeNotLeader, nil, err.Error()
	case errors.Is(err, role.ErrUnavailable):
		return wire.NodeUnavailable, nil, err.Error()
	}
	return wire.NodeFailed, nil, err.Error()
}

// errBadBody: a request whose fields decode but make no sense.
var errBadBody = errors.New("cluster: malformed request")

// done checks that the request was read whole.
func done(d *wire.NodeDec) error { return d.Done() }

func (c *Cluster) serveWriteGrant(_ string, d *wire.NodeDec, _ int) ([]byte, error) {
	ch, after := d.Str8(), d.U64()
	if err := done(d); err != nil {
		return nil, nil
	}
	g, err := c.mgr.WriteGrant(ch, after)
	if err != nil {
		return nil, err
	}
	var e wire.NodeEnc
	encGrant(&e, g)
	return e.B, nil
}

func (c *Cluster) serveCreate(_ string, d *wire.NodeDec, _ int) ([]byte, error) {
	ch := d.Str8()
	if err := done(d); err != nil {
		return nil, nil
	}
	if ch == "" {
		return nil, fmt.Errorf("%w: CREATE of an empty channel name", errBadBody)
	}
	if _, _, err := c.mgr.Info(ch, true); err != nil {
		return nil, err
	}
	var e wire.NodeEnc
	e.U64(c.st.Applied())
	return e.B, nil
}

func (c *Cluster) serveInterest(peer string, d *wire.NodeDec, _ int) ([]byte, error) {
	n := int(d.U16())
	type item struct {
		ch    string
		loops int
	}
	items := make([]item, 0, min(n, maxInterestBatch))
	for i := 0; i < n && d.Err() == nil; i++ {
		items = append(items, item{d.Str8(), int(d.U32())})
	}
	if err := done(d); err != nil {
		return nil, nil
	}
	for _, it := range items {
		c.mgr.SetInterest(it.ch, peer, it.loops)
	}
	return nil, nil
}

func (c *Cluster) serveExpire(_ string, d *wire.NodeDec, _ int) ([]byte, error) {
	ch, through := d.Str8(), d.U64()
	if err := done(d); err != nil {
		return nil, nil
	}
	n, err := c.mgr.Expire(ch, through)
	if err != nil {
		return nil, err
	}
	var e wire.NodeEnc
	e.U32(uint32(n))
	return e.B, nil
}

func (c *Cluster) serveUnreachableOp(_ string, d *wire.NodeDec, _ int) ([]byte, error) {
	req := decUnreachable(d)
	if err := done(d); err != nil {
		return nil, nil
	}
	return c.serveUnreachable(req)
}

func (c *Cluster) serveHost(_ string, d *wire.NodeDec, size int) ([]byte, error) {
	g := decHost(d, size)
	if err := done(d); err != nil {
		return nil, nil
	}
	return nil, c.host.HostStreamlet(g)
}

func (c *Cluster) serveSeal(_ string, d *wire.NodeDec, _ int) ([]byte, error) {
	id := d.U64()
	if err := done(d); err != nil {
		return nil, nil
	}
	end, err := c.host.Seal(id)
	if err != nil {
		return nil, err
	}
	var e wire.NodeEnc
	e.U64(end)
	return e.B, nil
}

func (c *Cluster) serveFree(from string, d *wire.NodeDec, _ int) ([]byte, error) {
	id := d.U64()
	if err := done(d); err != nil {
		return nil, nil
	}
	c.log.Debug("sluice cluster: freeing a streamlet at a peer's request", "streamlet", id, "from", from)
	c.host.Free(id)
	return nil, nil
}

func (c *Cluster) serveLen(_ string, d *wire.NodeDec, _ int) ([]byte, error) {
	id := d.U64()
	if err := done(d); err != nil {
		return nil, nil
	}
	var e wire.NodeEnc
	n, ok := c.host.Len(id)
	if ok {
		e.U8(1)
	} else {
		e.U8(0)
	}
	e.U32(uint32(n))
	return e.B, nil
}

func (c *Cluster) serveFence(_ string, d *wire.NodeDec, _ int) ([]byte, error) {
	id := d.U64()
	if err := done(d); err != nil {
		return nil, nil
	}
	t, err := c.host.Fence(id)
	if err != nil {
		return nil, err
	}
	var e wire.NodeEnc
	encTail(&e, t)
	return e.B, nil
}

func (c *Cluster) serveSealAt(_ string, d *wire.NodeDec, _ int) ([]byte, error) {
	id, n := d.U64(), d.U32()
	keep := decKeep(d)
	if err := done(d); err != nil {
		return nil, nil
	}
	return nil, c.host.SealAt(id, n, keep)
}

func (c *Cluster) serveDedupIDs(_ string, d *wire.NodeDec, size int) ([]byte, error) {
	ids, from, since := decIDsRequest(d, size)
	if err := done(d); err != nil {
		return nil, nil
	}
	var e wire.NodeEnc
	encIDPage(&e, c.host.MessageIDs(ids, from, since, 0))
	return e.B, nil
}

func (c *Cluster) serveCopy(_ string, d *wire.NodeDec, _ int) ([]byte, error) {
	ch, epoch, ref := decCopy(d)
	if err := done(d); err != nil {
		return nil, nil
	}
	return nil, c.copyHere(ch, epoch, ref)
}

func (c *Cluster) serveDrainOp(_ string, d *wire.NodeDec, _ int) ([]byte, error) {
	node := d.Str8()
	if err := done(d); err != nil {
		return nil, nil
	}
	return nil, c.serveDrain(node)
}

func (c *Cluster) serveStatus(_ string, d *wire.NodeDec, _ int) ([]byte, error) {
	if err := done(d); err != nil {
		return nil, nil
	}
	return json.Marshal(c.Status())
}

func (c *Cluster) serveList(_ string, d *wire.NodeDec, _ int) ([]byte, error) {
	ch := d.Str8()
	if err := done(d); err != nil {
		return nil, nil
	}
	hs, err := c.host.List(ch)
	if err != nil {
		return nil, err
	}
	var e wire.NodeEnc
	encHosted(&e, hs)
	return e.B, nil
}
