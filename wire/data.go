package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// DATA (0x08, server -> client), id = subscription id, flags 0.
//
//	off   size  field
//	0     8     first (u64): position of record 0
//	8     4     count (u32, >= 1)
//	12    ...   record run: count x (u32 len, payload); record i has position first+i
//
// A length word with bit 31 (RecordExt) set introduces an extended record
// (record.go); a server sends those only to a client that negotiated
// FeatureHeaders.
//
// The records fill the body exactly. The record run is byte for byte the
// layout a streamlet buffer stores, and the frame header carries the
// subscription id, so a server encodes the 12-byte prefix and the run once
// and shares them among all subscribers of a channel: only the 10-byte header
// differs per subscriber.

// AppendRecord appends one plain record (u32 length, payload) of a record
// run.
func AppendRecord(dst []byte, payload []byte) []byte {
	return AppendRecordExt(dst, payload, false)
}

// AppendRecordExt appends one record (u32 length word, body) of a record
// run. ext marks body as an extended record body (record.go, AppendExt); a
// plain record's body is its payload. len(body) must be <= RecordLenMask.
func AppendRecordExt(dst []byte, body []byte, ext bool) []byte {
	mustFit(TypeData, "record length", len(body), uint64(RecordLenMask))
	w := uint32(len(body))
	if ext {
		w |= RecordExt
	}
	dst = binary.BigEndian.AppendUint32(dst, w)
	return append(dst, body...)
}

// AppendDataPrefix appends the 12-byte prefix of a DATA body (first,
// count): the part of the body a server encodes once per batch and shares
// among the subscribers of a channel.
func AppendDataPrefix(dst []byte, first uint64, count uint32) []byte {
	dst = binary.BigEndian.AppendUint64(dst, first)
	return binary.BigEndian.AppendUint32(dst, count)
}

// DataPrefix decodes a prefix made by AppendDataPrefix; ok is false when p
// is shorter than DataPrefixLen.
func DataPrefix(p []byte) (first uint64, count uint32, ok bool) {
	if len(p) < DataPrefixLen {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(p), binary.BigEndian.Uint32(p[8:]), true
}

// AppendDataHeader appends the 10-byte header and the 12-byte prefix of a
// DATA frame whose record run of count records is recordsLen bytes long and
// is sent separately (e.g. by a vectored write of stored bytes). The caller
// guarantees that the run really holds count records in recordsLen bytes.
func AppendDataHeader(dst []byte, subID uint32, first uint64, count uint32, recordsLen int) []byte {
	dst = AppendHeader(dst, TypeData, 0, subID, DataPrefixLen+recordsLen)
	return AppendDataPrefix(dst, first, count)
}

// AppendData appends a whole DATA frame carrying payloads at positions
// first, first+1, ... It is a convenience for tests and small batches; the
// server's fan-out path uses AppendDataHeader and shares the record run.
func AppendData(dst []byte, subID uint32, first uint64, payloads ...[]byte) []byte {
	mustFit(TypeData, "record count", len(payloads), math.MaxUint32)
	n := 0
	for _, p := range payloads {
		n += RecordHeaderLen + len(p)
	}
	dst = AppendDataHeader(dst, subID, first, uint32(len(payloads)), n)
	for _, p := range payloads {
		dst = AppendRecord(dst, p)
	}
	return dst
}

// DecodeData decodes a DATA body and validates that exactly count records
// fill the record run, so that NextRecord can then iterate it without
// further checks. records is a capacity-capped sub-slice of body. A count of
// 0, a record overrunning the body, bytes left after the last record, or
// positions that would pass MaxUint64 are malformed, and so is an extended
// record whose body ParseExt refuses. It does not allocate.
func DecodeData(body []byte) (first uint64, count uint32, records []byte, err error) {
	d := decoder{b: body, frame: TypeData}
	first = d.u64("first")
	count = d.u32("count")
	records = d.rest()
	switch {
	case d.err != nil:
	case count == 0:
		d.failf("record count 0")
	case uint64(count) > uint64(len(records))/RecordHeaderLen:
		// Every record takes at least its length field.
		d.failf("record count %d cannot fit in %d bytes of records", count, len(records))
	case first > math.MaxUint64-uint64(count-1):
		d.failf("positions %d+%d overflow", first, count)
	}
	if d.err != nil {
		return 0, 0, nil, d.err
	}
	if err := checkRecords(TypeData, records, count, DataPrefixLen); err != nil {
		return 0, 0, nil, err
	}
	return first, count, records, nil
}

// checkRecords validates that exactly count records fill records, and that
// every extended record's body is well formed. base is the offset of the
// run in the frame body, for the error texts.
func checkRecords(t Type, records []byte, count uint32, base int) error {
	d := decoder{frame: t}
	off := 0
	for i := uint32(0); i < count; i++ {
		if len(records)-off < RecordHeaderLen {
			d.failf("record %d of %d: length field at offset %d overruns the body",
				i, count, base+off)
			return d.err
		}
		w := binary.BigEndian.Uint32(records[off:])
		n := w & RecordLenMask
		off += RecordHeaderLen
		if uint64(n) > uint64(len(records)-off) {
			d.failf("record %d of %d: length %d at offset %d overruns the body",
				i, count, n, base+off-RecordHeaderLen)
			return d.err
		}
		if w&RecordExt != 0 {
			if _, err := ParseExt(records[off:off+int(n)], t); err != nil {
				return fmt.Errorf("record %d of %d: %w", i, count, err)
			}
		}
		off += int(n)
	}
	if off != len(records) {
		d.failf("%d trailing bytes after %d records", len(records)-off, count)
		return d.err
	}
	return nil
}

// NextRecord splits the first record off a record run: it returns the
// record's payload (a capacity-capped sub-slice of records) and the rest of
// the run. Of an extended record it returns the payload part, without the
// message id and headers: code that stores or forwards records uses
// NextRecordExt, which keeps them. ok is false when records is empty or does
// not start with a whole record (or an extended record's body is
// malformed); on a run validated by DecodeData it is false only at the end.
// It does not allocate.
func NextRecord(records []byte) (payload, rest []byte, ok bool) {
	body, ext, rest, ok := NextRecordExt(records)
	if !ok || !ext {
		return body, rest, ok
	}
	e, err := ParseExt(body, TypeData)
	if err != nil {
		return nil, records, false
	}
	return e.Payload, rest, true
}

// NextRecordExt splits the first record off a record run: it returns the
// record's body (a capacity-capped sub-slice of records), whether it is an
// extended record (then body is an extended record body, for ParseExt;
// else it is the payload) and the rest of the run. ok is false when records
// is empty or does not start with a whole record; on a run validated by
// DecodeData it is false only at the end. It does not allocate.
func NextRecordExt(records []byte) (body []byte, ext bool, rest []byte, ok bool) {
	if len(records) < RecordHeaderLen {
		return nil, false, records, false
	}
	w := binary.BigEndian.Uint32(records)
	n := w & RecordLenMask
	if uint64(n) > uint64(len(records)-RecordHeaderLen) {
		return nil, false, records, false
	}
	end := RecordHeaderLen + int(n)
	return records[RecordHeaderLen:end:end], w&RecordExt != 0, records[end:], true
}

// RecordPayload returns the payload of a record body as NextRecord
// returned it: body itself for a plain record, the payload part of an
// extended one (nil if the extended body is malformed).
func RecordPayload(body []byte, ext bool) []byte {
	if !ext {
		return body
	}
	e, err := ParseExt(body, TypeData)
	if err != nil {
		return nil
	}
	return e.Payload
}
