package wire

import (
	"encoding/binary"
	"math"
)

// MaxFilterLen is the longest filter expression a server compiles; a
// longer one is well-formed and refused with INVALID_FILTER.
const MaxFilterLen = 1024

// ---------------------------------------------------------------------------
// SUBSCRIBE with FlagFilter (PROTOCOL.md 2.17): only after FeatureFilters.
// The body of a plain SUBSCRIBE, then the filter. Exact length:
//
//	off     size  field
//	0       22+C  as SUBSCRIBE (subID, startKind, startArg, epoch, channelLen, channel)
//	22+C    2     filterLen (u16, at least 1)
//	24+C    F     filter: the expression, UTF-8

// AppendSubscribeFilter appends a whole SUBSCRIBE frame with FlagFilter
// carrying filter (1..65535 bytes).
func AppendSubscribeFilter(dst []byte, id uint32, s Subscribe, filter string) []byte {
	mustFit(TypeSubscribe, "channel length", len(s.Channel), MaxChannelLen)
	mustFit(TypeSubscribe, "filter length", len(filter), math.MaxUint16)
	start := len(dst)
	dst = AppendSubscribe(dst, id, s)
	n := subscribeFixedLen + len(s.Channel) + 2 + len(filter)
	binary.BigEndian.PutUint32(dst[start:], uint32(n))
	dst[start+5] |= byte(FlagFilter)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(filter)))
	return append(dst, filter...)
}

// DecodeSubscribeFilter decodes the body of a SUBSCRIBE with FlagFilter;
// the channel and the filter alias it.
func DecodeSubscribeFilter(body []byte) (Subscribe, []byte, error) {
	cl := 0
	if len(body) >= subscribeFixedLen {
		cl = int(body[subscribeFixedLen-1])
	}
	end := min(len(body), subscribeFixedLen+cl)
	s, err := DecodeSubscribe(body[:end:end])
	if err != nil {
		return Subscribe{}, nil, err
	}
	d := decoder{b: body, off: end, frame: TypeSubscribe}
	fl := d.u16("filterLen")
	if d.err == nil && fl == 0 {
		d.failf("empty filter")
	}
	f := d.bytes(int(fl), "filter")
	if err := d.exact(); err != nil {
		return Subscribe{}, nil, err
	}
	return s, f, nil
}

// ---------------------------------------------------------------------------
// FDATA (0x11, server -> client), id = subscription id, flags 0: the
// messages of a filtered subscription that matched, each with its
// position (PROTOCOL.md 2.17). Only after FeatureFilters. Exact length:
//
//	off   size  field
//	0     4     count (u32, >= 1)
//	4     ...   count x entry: position (u64), length word (u32: bit 31
//	            RecordExt, bits 0..30 the length L), L bytes of body
//
// Positions are at least 1 and strictly increase within the frame.

// FDataPrefixLen is the size of an FDATA body's count field.
const FDataPrefixLen = 4

// FEntryOverhead is what an entry adds to its record body.
const FEntryOverhead = 8 + 4

// AppendFDataHeader appends the 10-byte header of an FDATA frame whose
// body (prefix and entries) is bodyLen bytes.
func AppendFDataHeader(dst []byte, subID uint32, bodyLen int) []byte {
	return AppendHeader(dst, TypeFData, 0, subID, bodyLen)
}

// AppendFDataPrefix appends an FDATA body's count.
func AppendFDataPrefix(dst []byte, count uint32) []byte {
	return binary.BigEndian.AppendUint32(dst, count)
}

// AppendFEntry appends one entry: position, then the record (length word
// and body) as AppendRecordExt writes it.
func AppendFEntry(dst []byte, pos uint64, body []byte, ext bool) []byte {
	dst = binary.BigEndian.AppendUint64(dst, pos)
	return AppendRecordExt(dst, body, ext)
}

// FRecord is one entry of an FDATA frame.
type FRecord struct {
	Pos  uint64
	Body []byte
	Ext  bool
}

// AppendFData appends a whole FDATA frame of recs (at least one).
func AppendFData(dst []byte, subID uint32, recs []FRecord) []byte {
	n := FDataPrefixLen
	for _, r := range recs {
		n += FEntryOverhead + len(r.Body)
	}
	dst = AppendFDataHeader(dst, subID, n)
	dst = AppendFDataPrefix(dst, uint32(len(recs)))
	for _, r := range recs {
		dst = AppendFEntry(dst, r.Pos, r.Body, r.Ext)
	}
	return dst
}

// DecodeFData checks an FDATA body: a count of at least 1, entries that
// fill the body exactly, positions from 1 strictly increasing. It returns
// the entries for NextFEntry; they alias body.
func DecodeFData(body []byte) (count uint32, entries []byte, err error) {
	d := decoder{b: body, frame: TypeFData}
	count = d.u32("count")
	if d.err == nil && count == 0 {
		d.failf("entry count 0")
	}
	if d.err == nil && uint64(count) > uint64(len(body)-FDataPrefixLen)/FEntryOverhead {
		d.failf("entry count %d cannot fit in %d bytes", count, len(body)-FDataPrefixLen)
	}
	entries = d.rest()
	if d.err != nil {
		return 0, nil, d.err
	}
	var prev uint64
	rest := entries
	for i := uint32(0); i < count; i++ {
		off := len(body) - len(rest)
		if len(rest) < FEntryOverhead {
			d.off = off
			d.failf("entry %d of %d at offset %d: %d bytes left, an entry needs %d", i, count, off, len(rest), FEntryOverhead)
			return 0, nil, d.err
		}
		pos := binary.BigEndian.Uint64(rest)
		n := int(binary.BigEndian.Uint32(rest[8:]) & RecordLenMask)
		switch {
		case pos <= prev:
			d.failf("entry %d at offset %d: position %d after %d", i, off, pos, prev)
		case n > len(rest)-FEntryOverhead:
			d.failf("entry %d at offset %d: length %d overruns the body", i, off+8, n)
		}
		if d.err != nil {
			return 0, nil, d.err
		}
		prev, rest = pos, rest[FEntryOverhead+n:]
	}
	if len(rest) != 0 {
		d.failf("%d trailing bytes after %d entries", len(rest), count)
		return 0, nil, d.err
	}
	return count, entries, nil
}

// NextFEntry returns the first entry of checked entries (DecodeFData) and
// the rest; ok is false when none is left.
func NextFEntry(entries []byte) (pos uint64, body []byte, ext bool, rest []byte, ok bool) {
	if len(entries) < FEntryOverhead {
		return 0, nil, false, nil, false
	}
	pos = binary.BigEndian.Uint64(entries)
	w := binary.BigEndian.Uint32(entries[8:])
	n := int(w & RecordLenMask)
	if n > len(entries)-FEntryOverhead {
		return 0, nil, false, nil, false
	}
	end := FEntryOverhead + n
	return pos, entries[FEntryOverhead:end:end], w&RecordExt != 0, entries[end:], true
}

// PutFDataCount writes count into the prefix of an FDATA body made by
// AppendFDataPrefix (the encoder fills it in once the entries are known).
func PutFDataCount(body []byte, count uint32) { binary.BigEndian.PutUint32(body, count) }

// FDataCount reads the count of an FDATA body; ok is false when it is
// shorter than FDataPrefixLen.
func FDataCount(body []byte) (uint32, bool) {
	if len(body) < FDataPrefixLen {
		return 0, false
	}
	return binary.BigEndian.Uint32(body), true
}
