package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/klauspost/compress/s2"
)

// S2 compression (PROTOCOL.md 2.15), negotiated with FeatureS2. A frame with
// FlagCompressed carries, in place of its uncompressed part, one S2 block
// (github.com/klauspost/compress/s2, block format: a uvarint of the decoded
// length, then the compressed stream):
//
//	PUBLISH      channelLen, channel, S2(payload or extended record body)
//	DATA         first, count, S2(record run)
//	NODE_APPEND  streamlet, epoch, count, S2(record run)
//	NODE_FEED    streamlet, start, flags, count, stamps, S2(record run)
//
// A receiver reads the decoded length first and refuses the frame as
// malformed when it is over the limit that bounds the uncompressed part
// (max payload for PUBLISH, the body limit for the others), before it
// allocates anything; so a small frame that claims to expand hugely costs
// the receiver nothing but the closing of the connection.

// DefaultS2Threshold is the smallest uncompressed part that senders of this
// implementation compress (smaller ones rarely shrink enough to pay).
const DefaultS2Threshold = 512

// AppendS2 appends the S2 block encoding of src to dst.
func AppendS2(dst, src []byte) []byte {
	n := s2.MaxEncodedLen(len(src))
	if n < 0 {
		panic(fmt.Sprintf("wire: %d bytes are too many for one S2 block", len(src)))
	}
	if cap(dst)-len(dst) < n {
		grown := make([]byte, len(dst), len(dst)+n)
		copy(grown, dst)
		dst = grown
	}
	enc := s2.Encode(dst[len(dst):len(dst)+n], src)
	return dst[:len(dst)+len(enc)]
}

// S2DecodedLen returns the decoded length an S2 block declares, checked
// against limit. It reads only the block's first bytes.
func S2DecodedLen(block []byte, limit int, frame Type) (int, error) {
	n, err := s2.DecodedLen(block)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w: %v: compressed block: %v", ErrMalformed, frame, err)
	case n > limit:
		return 0, fmt.Errorf("%w: %v: compressed block claims %d bytes, the limit is %d", ErrMalformed, frame, n, limit)
	}
	return n, nil
}

// DecodeS2 decodes an S2 block into dst's capacity (or a new slice, when
// it is too small) after S2DecodedLen checked the declared length against
// limit. The result's length is the declared one; a block that does not
// decode to exactly that is malformed.
func DecodeS2(dst, block []byte, limit int, frame Type) ([]byte, error) {
	n, err := S2DecodedLen(block, limit, frame)
	if err != nil {
		return dst[:0], err
	}
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	out, err := s2.Decode(dst[:n], block)
	if err != nil {
		return dst[:0], fmt.Errorf("%w: %v: compressed block: %v", ErrMalformed, frame, err)
	}
	return out, nil
}

// AppendPublishS2 appends a PUBLISH frame whose bytes after the channel,
// rest (a payload, or an extended record body when flags has FlagExt), are
// S2-compressed; FlagCompressed is added. scratch is reused for the block
// and returned for the next call. Only for a connection that negotiated
// FeatureS2 (and FeatureHeaders for FlagExt).
func AppendPublishS2(dst []byte, id uint32, flags Flags, channel string, rest, scratch []byte) (frame, scratchOut []byte) {
	mustFit(TypePublish, "channel length", len(channel), MaxChannelLen)
	scratch = AppendS2(scratch[:0], rest)
	dst = AppendHeader(dst, TypePublish, flags|FlagCompressed, id, 1+len(channel)+len(scratch))
	dst = append(dst, byte(len(channel)))
	dst = append(dst, channel...)
	return append(dst, scratch...), scratch
}

// AppendDataS2Header appends the header and prefix of a compressed DATA
// frame whose record run of count records was compressed to an S2 block of
// blockLen bytes, which the caller sends next (shared among subscribers).
func AppendDataS2Header(dst []byte, subID uint32, first uint64, count uint32, blockLen int) []byte {
	dst = AppendHeader(dst, TypeData, FlagCompressed, subID, DataPrefixLen+blockLen)
	dst = binary.BigEndian.AppendUint64(dst, first)
	return binary.BigEndian.AppendUint32(dst, count)
}

// Inflate rebuilds the uncompressed body of a frame with FlagCompressed:
// the first prefix bytes of body as they are, followed by the decoded S2
// block that fills the rest of body. The result, in dst's capacity or a new
// slice, is at most maxBody bytes: a block declaring more is malformed
// before anything is allocated. Decode the result with the frame's usual
// decoder (DecodeData, DecodeNodeAppend, DecodeNodeFeed, or the PUBLISH
// path with prefix = 1 + channel length).
func Inflate(dst, body []byte, prefix int, maxBody uint32, frame Type) ([]byte, error) {
	if prefix < 0 || len(body) < prefix {
		return dst[:0], fmt.Errorf("%w: %v: compressed body of %d bytes is shorter than its %d-byte prefix", ErrMalformed, frame, len(body), prefix)
	}
	block := body[prefix:]
	n, err := S2DecodedLen(block, int(min(uint64(maxBody), uint64(^uint(0)>>1)))-prefix, frame)
	if err != nil {
		return dst[:0], err
	}
	if cap(dst) < prefix+n {
		dst = make([]byte, prefix+n)
	}
	dst = dst[:prefix+n]
	copy(dst, body[:prefix])
	if _, err := s2.Decode(dst[prefix:], block); err != nil {
		return dst[:0], fmt.Errorf("%w: %v: compressed block: %v", ErrMalformed, frame, err)
	}
	return dst, nil
}

// DecodeDataS2 decodes the body of a DATA frame with FlagCompressed:
// Inflate into dst (bounded by maxBody, the receiver's body limit), then
// DecodeData. records aliases the returned buffer, which the caller may
// reuse for the next frame once it is done with records.
func DecodeDataS2(body, dst []byte, maxBody uint32) (first uint64, count uint32, records, buf []byte, err error) {
	buf, err = Inflate(dst, body, DataPrefixLen, maxBody, TypeData)
	if err != nil {
		return 0, 0, nil, buf, err
	}
	first, count, records, err = DecodeData(buf)
	return first, count, records, buf, err
}

// PublishPrefixLen returns the length of the uncompressed prefix of a
// PUBLISH body (channelLen and channel), for Inflate; it is malformed when
// the channel does not fit.
func PublishPrefixLen(body []byte) (int, error) {
	if len(body) < 1 || body[0] == 0 || int(body[0]) > len(body)-1 {
		return 0, fmt.Errorf("%w: PUBLISH: channel does not fit in a compressed body of %d bytes", ErrMalformed, len(body))
	}
	return 1 + int(body[0]), nil
}

// AppendNodeAppendS2Header appends the header and prefix of a NODE_APPEND
// with FlagCompressed whose record run of a.Count records was compressed
// to an S2 block of blockLen bytes, which the caller appends next.
func AppendNodeAppendS2Header(dst []byte, id uint32, a NodeAppend, blockLen int) []byte {
	dst = AppendHeader(dst, TypeNodeAppend, FlagCompressed, id, NodeAppendPrefixLen+blockLen)
	dst = binary.BigEndian.AppendUint64(dst, a.Streamlet)
	dst = binary.BigEndian.AppendUint64(dst, a.Epoch)
	return binary.BigEndian.AppendUint32(dst, a.Count)
}

// AppendNodeFeedS2Header appends the header, prefix and stamps of a
// NODE_FEED with FlagCompressed whose record run (len(stamps) records) was
// compressed to an S2 block of blockLen bytes, which the caller appends.
func AppendNodeFeedS2Header(dst []byte, f NodeFeed, stamps []int64, blockLen int) []byte {
	start := len(dst)
	dst = AppendNodeFeedHeader(dst, f, stamps, blockLen)
	dst[start+5] = byte(FlagCompressed)
	return dst
}

// NodeFeedPrefix returns the length of the uncompressed prefix of a
// compressed NODE_FEED body (the fixed fields and the stamps), for
// Inflate; a count whose stamps do not fit is malformed.
func NodeFeedPrefix(body []byte) (int, error) {
	if len(body) < NodeFeedPrefixLen {
		return 0, fmt.Errorf("%w: NODE_FEED: compressed body of %d bytes has no prefix", ErrMalformed, len(body))
	}
	count := binary.BigEndian.Uint32(body[13:])
	n := uint64(NodeFeedPrefixLen) + 8*uint64(count)
	if n > uint64(len(body)) {
		return 0, fmt.Errorf("%w: NODE_FEED: %d stamps do not fit in a compressed body of %d bytes", ErrMalformed, count, len(body))
	}
	return int(n), nil
}

// AppendCompressedRun appends to dst an S2 block of the record run held in
// segs (nbytes in all), using scratch to join them, and reports whether it
// pays: at least min bytes and a block under seven eighths of the run.
// When it does not, dst is returned unchanged. scratch is returned for
// reuse.
func AppendCompressedRun(dst []byte, segs [][]byte, nbytes, min int, scratch []byte) (out []byte, ok bool, scratchOut []byte) {
	if nbytes < min {
		return dst, false, scratch
	}
	src := scratch[:0]
	if len(segs) == 1 {
		src = segs[0]
	} else {
		for _, s := range segs {
			src = append(src, s...)
		}
		scratch = src
	}
	start := len(dst)
	dst = AppendS2(dst, src)
	if len(dst)-start >= len(src)-len(src)/8 {
		return dst[:start], false, scratch
	}
	return dst, true, scratch
}
