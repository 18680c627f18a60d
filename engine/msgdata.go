package engine

import (
	"github.com/sluice-rtm/sluice/wire"
)

// dataBatch is one DATA batch read for delivery: the shared prefix and the
// stored record run, and the other encodings some subscribers need, each
// built at most once per batch and shared by every subscriber of its kind
// (PROTOCOL.md 2.8, 2.14, 2.15):
//
//   - the run as stored, for subscribers with FeatureHeaders, and for all
//     when the batch holds no extended record;
//   - the run with the extensions removed (payloads alone), for
//     subscribers without FeatureHeaders when it holds some;
//   - either of these as one S2 block, for subscribers with FeatureS2 when
//     the run is at least s2Min bytes and the block is smaller.
//
// Built bytes live in l.shared until the loop's flush, like the prefixes.
// A dataBatch is valid until the next read on the loop (l.iov is reused).
type dataBatch struct {
	l      *loop
	r      readResult
	prefix []byte
	run    [][]byte

	extKnown, hasExt bool
	stripped         []byte
	z                [2][]byte // S2 blocks of the run (0) and of the stripped run (1)
	zTried           [2]bool
	one              [1][]byte // run of a single slice, without allocating
}

// s2Min is the smallest record run the server compresses for S2
// subscribers.
const s2Min = wire.DefaultS2Threshold

// batch prepares l.db for a batch just read into l.iov.
func (l *loop) batch(r readResult) *dataBatch {
	b := &l.db
	*b = dataBatch{l: l, r: r, prefix: l.prefix(r.first, r.count), run: l.iov}
	return b
}

// ext reports whether the batch holds an extended record.
func (b *dataBatch) ext() bool {
	if !b.extKnown {
		b.extKnown = true
	scan:
		for _, seg := range b.run {
			for _, ext, rest, ok := wire.NextRecordExt(seg); ok; _, ext, rest, ok = wire.NextRecordExt(rest) {
				if ext {
					b.hasExt = true
					break scan
				}
			}
		}
	}
	return b.hasExt
}

// strip returns the run without extensions, built once.
func (b *dataBatch) strip() []byte {
	if b.stripped == nil {
		l := b.l
		start := len(l.shared)
		for _, seg := range b.run {
			l.shared, _ = wire.StripRun(l.shared, seg) // stored runs are valid
		}
		b.stripped = l.shared[start:len(l.shared):len(l.shared)]
	}
	return b.stripped
}

// compressed returns the S2 block of the run (stripped or not), or nil
// when it does not pay; built once.
func (b *dataBatch) compressed(stripped bool) []byte {
	k := 0
	if stripped {
		k = 1
	}
	if b.zTried[k] {
		return b.z[k]
	}
	b.zTried[k] = true
	l := b.l
	var src []byte
	if stripped {
		src = b.strip()
	} else if len(b.run) == 1 {
		src = b.run[0]
	} else {
		l.zin = l.zin[:0]
		for _, seg := range b.run {
			l.zin = append(l.zin, seg...)
		}
		src = l.zin
	}
	if len(src) < s2Min {
		return nil
	}
	start := len(l.shared)
	l.shared = wire.AppendS2(l.shared, src)
	blk := l.shared[start:len(l.shared):len(l.shared)]
	if len(blk) >= len(src)-len(src)/8 { // under 12.5% saved: not worth the receiver's work
		l.shared = l.shared[:start]
		return nil
	}
	b.z[k] = blk
	l.srv.s2Batches.Add(1)
	return blk
}

// sendTo queues the batch for subscription subID of c in the encoding c
// negotiated.
func (b *dataBatch) sendTo(c *conn, subID uint32) {
	strip := !c.headers && b.ext()
	if c.s2 && b.r.nbytes >= s2Min {
		if blk := b.compressed(strip); blk != nil {
			b.one[0] = blk
			c.sendDataFlags(subID, wire.FlagCompressed, b.prefix, b.one[:], len(blk))
			return
		}
	}
	if strip {
		b.one[0] = b.strip()
		c.sendDataFlags(subID, 0, b.prefix, b.one[:], len(b.one[0]))
		return
	}
	c.sendDataFlags(subID, 0, b.prefix, b.run, b.r.nbytes)
}
