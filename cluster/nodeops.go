package cluster

import (
	"fmt"
	"slices"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/manager"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// Op bodies of NODE_REQUEST and NODE_RESPONSE (PROTOCOL.md 9.4): the
// role types to and from bytes. Decoders bound every count by
// what the body can hold before allocating.

func encGrant(e *wire.NodeEnc, g role.Grant) {
	e.Str8(g.Channel)
	e.U64(g.Epoch)
	e.U64(g.Streamlet)
	e.Str8(g.Host)
	e.U64(g.First)
	e.U32(uint32(g.LimitMsgs))
	e.U32(uint32(g.LimitSize))
	e.I64(g.LeaseEnd)
	if len(g.Replicas) > 1 {
		encNames(e, g.Replicas)
	}
}

// maxReplicas bounds a replica set on the wire (and in Options).
const maxReplicas = 16

// encNames appends u8 n, n x str8: a replica set.
func encNames(e *wire.NodeEnc, names []string) {
	e.U8(uint8(len(names)))
	for _, n := range names {
		e.Str8(n)
	}
}

// decNames reads a replica set: 2..maxReplicas distinct names.
func decNames(d *wire.NodeDec) []string {
	n := int(d.U8())
	if d.Err() != nil {
		return nil
	}
	if n < 2 || n > maxReplicas {
		d.Fail("%d replicas, want 2..%d", n, maxReplicas)
		return nil
	}
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		s := d.Str8()
		if d.Err() == nil && (s == "" || slices.Contains(out, s)) {
			d.Fail("replica %d: %q empty or repeated", i, s)
		}
		out = append(out, s)
	}
	if d.Err() != nil {
		return nil
	}
	return out
}

func decGrant(d *wire.NodeDec) role.Grant {
	g := role.Grant{Channel: d.Str8(), Epoch: d.U64(), Streamlet: d.U64(), Host: d.Str8(), First: d.U64()}
	g.LimitMsgs, g.LimitSize = int(d.U32()), int(d.U32())
	g.LeaseEnd = d.I64()
	if d.Err() == nil && d.More() {
		// A replicated streamlet's grant ends with its replica set.
		g.Replicas = decNames(d)
		if d.Err() == nil && g.Replicas[0] != g.Host {
			d.Fail("first replica %q is not the host %q", g.Replicas[0], g.Host)
		}
	}
	if d.Err() == nil && (g.LimitMsgs < 1 || g.LimitMsgs > 1<<24 || g.LimitSize < 1 || g.LimitSize > 1<<30) {
		d.Fail("grant limits %d msgs, %d bytes out of range", g.LimitMsgs, g.LimitSize)
	}
	return g
}

// priorMinLen is the smallest encoded prior streamlet (empty host).
const priorMinLen = 8 + 1 + 8 + 8

// encHost is HOST's request: the streamlets before the new one that the
// host completes its dedup window from (role.Grant.Prior), then the grant
// (which may end with its optional replica set, so it comes last).
func encHost(e *wire.NodeEnc, g role.Grant) {
	e.U16(uint16(len(g.Prior)))
	for _, r := range g.Prior {
		e.U64(r.ID)
		e.Str8(r.Host)
		e.U64(r.First)
		e.U64(r.End)
	}
	encGrant(e, g)
}

func decHost(d *wire.NodeDec, size int) role.Grant {
	n := int(d.U16())
	if d.Err() == nil && (n > role.MaxPrior || n*priorMinLen > size) {
		d.Fail("%d prior streamlets: more than %d or than %d bytes hold", n, role.MaxPrior, size)
	}
	var prior []role.StreamletRef
	if d.Err() == nil && n > 0 {
		prior = make([]role.StreamletRef, 0, n)
		for range n {
			prior = append(prior, role.StreamletRef{ID: d.U64(), Host: d.Str8(), First: d.U64(), End: d.U64(), Closed: true})
		}
	}
	g := decGrant(d)
	if d.Err() == nil {
		g.Prior = prior
	}
	return g
}

// storedIDMinLen is the smallest encoded id of a DEDUP_IDS page.
const storedIDMinLen = 2 + 4 + 8 + 1 + 1

// encIDsRequest is DEDUP_IDS's request.
func encIDsRequest(e *wire.NodeEnc, streamlets []uint64, from int, since int64) {
	e.I64(since)
	e.U32(uint32(from))
	e.U16(uint16(len(streamlets)))
	for _, id := range streamlets {
		e.U64(id)
	}
}

func decIDsRequest(d *wire.NodeDec, size int) (streamlets []uint64, from int, since int64) {
	since, from = d.I64(), int(d.U32())
	n := int(d.U16())
	if d.Err() == nil && (n > role.MaxPrior || n*8 > size) {
		d.Fail("%d streamlets: more than %d or than %d bytes hold", n, role.MaxPrior, size)
	}
	if d.Err() != nil {
		return nil, 0, 0
	}
	streamlets = make([]uint64, 0, n)
	for range n {
		streamlets = append(streamlets, d.U64())
	}
	return streamlets, from, since
}

// encIDPage is DEDUP_IDS's result.
func encIDPage(e *wire.NodeEnc, pg host.IDPage) {
	e.U16(uint16(pg.Done))
	e.U32(uint32(pg.Next))
	e.U16(uint16(len(pg.IDs))) // at most IDPageBytes/16
	for _, x := range pg.IDs {
		e.U16(uint16(x.K))
		e.U32(uint32(x.Index))
		e.I64(x.Stamp)
		e.Str8(string(x.ID))
	}
}

// decIDPage decodes a DEDUP_IDS result for a request of n streamlets.
func decIDPage(body []byte, n int) (host.IDPage, error) {
	d := wire.NewNodeDec(wire.TypeNodeResponse, body)
	pg := host.IDPage{Done: int(d.U16()), Next: int(d.U32())}
	c := int(d.U16())
	switch {
	case d.Err() != nil:
	case pg.Done > n:
		d.Fail("%d of %d streamlets done", pg.Done, n)
	case c*storedIDMinLen > len(body):
		d.Fail("%d ids cannot fit in %d bytes", c, len(body))
	}
	if d.Err() == nil && c > 0 {
		pg.IDs = make([]host.StoredID, 0, c)
	}
	for i := 0; i < c && d.Err() == nil; i++ {
		x := host.StoredID{K: int(d.U16()), Index: int(d.U32()), Stamp: d.I64(), ID: []byte(d.Str8())}
		switch {
		case d.Err() != nil:
		case len(x.ID) == 0:
			d.Fail("empty message id")
		case x.K >= n || (i > 0 && (x.K < pg.IDs[i-1].K || x.K == pg.IDs[i-1].K && x.Index <= pg.IDs[i-1].Index)):
			d.Fail("id %d: streamlet %d record %d out of order", i, x.K, x.Index)
		}
		pg.IDs = append(pg.IDs, x)
	}
	if err := d.Done(); err != nil {
		return host.IDPage{}, err
	}
	return pg, nil
}

// LIST (PROTOCOL.md 9.5) reports the streamlets of a channel a node
// hosts: diagnostics only (bench/cluster's spread, read-only), nothing
// decides on it. Entry: u64 id, u64 epoch, u64 first, u32 len, u8 flags,
// i64 lease end, u32 message limit, then, when REPLICATED, the replica
// set (u8 n, n x str8).

// hostedMinLen is the smallest encoded entry.
const hostedMinLen = 8 + 8 + 8 + 4 + 1 + 8 + 4

// LIST entry flags.
const (
	hostedSealed     = 1
	hostedFenced     = 2
	hostedFinal      = 4
	hostedReplicated = 8 // the entry ends with its replica set
)

func encHosted(e *wire.NodeEnc, hs []role.Hosted) {
	e.U16(uint16(min(len(hs), 0xFFFF)))
	for _, h := range hs[:min(len(hs), 0xFFFF)] {
		e.U64(h.ID)
		e.U64(h.Epoch)
		e.U64(h.First)
		e.U32(h.Len)
		var f uint8
		if h.Sealed {
			f |= hostedSealed
		}
		if h.Fenced {
			f |= hostedFenced
		}
		if h.Final {
			f |= hostedFinal
		}
		if len(h.Replicas) > 1 {
			f |= hostedReplicated
		}
		e.U8(f)
		e.I64(h.LeaseEnd)
		e.U32(h.LimitMsgs)
		if len(h.Replicas) > 1 {
			encNames(e, h.Replicas)
		}
	}
}

// DecodeHosted decodes a LIST result from node host (also bench/cluster's
// probe: one decoder, fuzzed).
func DecodeHosted(body []byte, host string) ([]role.Hosted, error) {
	d := wire.NewNodeDec(wire.TypeNodeResponse, body)
	n := int(d.U16())
	if d.Err() == nil && n*hostedMinLen > len(body) {
		d.Fail("%d streamlets cannot fit in %d bytes", n, len(body))
	}
	if d.Err() != nil {
		return nil, d.Err()
	}
	out := make([]role.Hosted, 0, n)
	for i := 0; i < n; i++ {
		h := role.Hosted{ID: d.U64(), Epoch: d.U64(), First: d.U64(), Len: d.U32(), Host: host}
		f := d.U8()
		if d.Err() == nil && f&^(hostedSealed|hostedFenced|hostedFinal|hostedReplicated) != 0 {
			d.Fail("streamlet %d: unknown flags 0x%02x", i, f)
		}
		h.Sealed, h.Fenced, h.Final = f&hostedSealed != 0, f&hostedFenced != 0, f&hostedFinal != 0
		h.LeaseEnd, h.LimitMsgs = d.I64(), d.U32()
		if f&hostedReplicated != 0 {
			h.Replicas = decNames(d)
		}
		if d.Err() != nil {
			return nil, d.Err()
		}
		out = append(out, h)
	}
	return out, d.Done()
}

// FENCE result flags.
const tailFinal = 0x01

// encTail encodes a FENCE result: u8 flags (0x01 FINAL), u32 held.
func encTail(e *wire.NodeEnc, t role.Tail) {
	var f uint8
	if t.Final {
		f |= tailFinal
	}
	e.U8(f)
	e.U32(t.Held)
}

func decTail(b []byte) (role.Tail, error) {
	d := wire.NewNodeDec(wire.TypeNodeResponse, b)
	f := d.U8()
	t := role.Tail{Held: d.U32(), Final: f&tailFinal != 0}
	if f&^tailFinal != 0 {
		d.Fail("FENCE: unknown flags 0x%02x", f)
	}
	return t, d.Done()
}

// encKeep encodes SEAL_AT's replica list: u16 n, n x str8.
func encKeep(e *wire.NodeEnc, keep []string) {
	e.U16(uint16(len(keep)))
	for _, n := range keep {
		e.Str8(n)
	}
}

// decKeep decodes SEAL_AT's replica list (at most maxReplicas names).
func decKeep(d *wire.NodeDec) []string {
	n := int(d.U16())
	if d.Err() == nil && n > maxReplicas {
		d.Fail("SEAL_AT: %d replicas, at most %d", n, maxReplicas)
	}
	if d.Err() != nil {
		return nil
	}
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, d.Str8())
	}
	return out
}

// opError is a NODE_RESPONSE with a non-zero status: the peer answered,
// so the link is fine, but the operation failed.
type opError struct {
	status uint8
	text   string
}

func (e *opError) Error() string {
	return fmt.Sprintf("cluster: peer: status %d: %s", e.status, e.text)
}

// Is maps the statuses that stand for role errors back to them.
func (e *opError) Is(target error) bool {
	switch e.status {
	case wire.NodeUnknown:
		return target == role.ErrUnknownStreamlet
	case wire.NodeNotLeader:
		return target == role.ErrNotLeader
	case wire.NodeOverload, wire.NodeUnavailable:
		return target == role.ErrUnavailable
	}
	return false
}

// UNREACHABLE (PROTOCOL.md 9.5): the request names the channel, the
// streamlet, its orderer and the follower it cannot reach; the result is
// the streamlet's state once recovered.
type unreachableReq struct {
	Channel           string
	ID                uint64
	Orderer, Follower string
}

func encUnreachable(e *wire.NodeEnc, r unreachableReq) {
	e.Str8(r.Channel)
	e.U64(r.ID)
	e.Str8(r.Orderer)
	e.Str8(r.Follower)
}

func decUnreachable(d *wire.NodeDec) unreachableReq {
	return unreachableReq{Channel: d.Str8(), ID: d.U64(), Orderer: d.Str8(), Follower: d.Str8()}
}

// recoveredLost is the LOST flag of UNREACHABLE's result.
const recoveredLost = 0x01

func encRecovered(e *wire.NodeEnc, r manager.Recovered) {
	var f uint8
	if r.Lost {
		f |= recoveredLost
	}
	e.U8(f)
	e.U32(r.Len)
	encKeep(e, r.Replicas)
}

func decRecovered(b []byte) (manager.Recovered, error) {
	d := wire.NewNodeDec(wire.TypeNodeResponse, b)
	f := d.U8()
	r := manager.Recovered{Lost: f&recoveredLost != 0, Len: d.U32(), Replicas: decKeep(d)}
	if d.Err() == nil && f&^recoveredLost != 0 {
		d.Fail("UNREACHABLE: unknown flags 0x%02x", f)
	}
	if d.Err() == nil && r.Lost && (r.Len != 0 || len(r.Replicas) != 0) {
		d.Fail("UNREACHABLE: a lost streamlet with len %d and %d replicas", r.Len, len(r.Replicas))
	}
	if d.Err() == nil && !r.Lost && len(r.Replicas) == 0 {
		d.Fail("UNREACHABLE: a recovered streamlet held by no replica")
	}
	return r, d.Done()
}
