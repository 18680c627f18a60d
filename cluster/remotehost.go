package cluster

import (
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// remoteHost is the Host role of a peer node, reached over a link.
type remoteHost struct {
	c    *Cluster
	node string
}

func (h remoteHost) HostStreamlet(g role.Grant) error {
	var e wire.NodeEnc
	encHost(&e, g)
	_, err := h.c.call(h.node, wire.OpHost, e.B)
	return err
}

func (h remoteHost) Seal(id uint64) (uint64, error) {
	var e wire.NodeEnc
	e.U64(id)
	b, err := h.c.call(h.node, wire.OpSeal, e.B)
	if err != nil {
		return 0, err
	}
	d := wire.NewNodeDec(wire.TypeNodeResponse, b)
	end := d.U64()
	return end, d.Done()
}

func (h remoteHost) Free(id uint64) {
	var e wire.NodeEnc
	e.U64(id)
	if l := h.c.links.Dial(h.node); l != nil {
		l.Post(wire.OpFree, e.B)
	}
}

func (h remoteHost) Len(id uint64) (int, bool) {
	var e wire.NodeEnc
	e.U64(id)
	b, err := h.c.call(h.node, wire.OpLen, e.B)
	if err != nil {
		return 0, false
	}
	d := wire.NewNodeDec(wire.TypeNodeResponse, b)
	found, n := d.U8(), d.U32()
	if d.Done() != nil || found == 0 {
		return 0, false
	}
	return int(n), true
}

var _ role.Host = remoteHost{}

// idSource reads other nodes' message ids for the host's dedup window
// (host.IDSource, op DEDUP_IDS).
type idSource struct{ c *Cluster }

func (s idSource) MessageIDs(node string, streamlets []uint64, from int, since int64, deadline time.Time) (host.IDPage, error) {
	var e wire.NodeEnc
	encIDsRequest(&e, streamlets, from, since)
	b, err := s.c.callFor(node, wire.OpDedupIDs, e.B, time.Until(deadline))
	if err != nil {
		return host.IDPage{}, err
	}
	return decIDPage(b, len(streamlets))
}
