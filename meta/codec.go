package meta

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every decode error of a command or a snapshot:
// the bytes are not a valid encoding (they came from a peer or a disk and
// are untrusted until decoded).
var ErrMalformed = errors.New("meta: malformed")

// Limits of the encodings, checked before anything is allocated.
const (
	// MaxName bounds a channel or node name (str8: one length byte).
	MaxName = 255
	// MaxSet bounds a replica set or a list of added or removed holders.
	MaxSet = 16
	// MaxBatch bounds the entries of one Expire or Drop command.
	MaxBatch = 4096
	// MaxList bounds the streamlets of one channel in a snapshot.
	MaxList = 1 << 20
)

// enc appends big-endian fields to b (franz-go kbin style).
type enc struct{ b []byte }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *enc) i64(v int64)  { e.u64(uint64(v)) }

// str8 appends a name; it panics on a name the format cannot carry (an
// encoder's caller bug, never input: names are checked where they enter).
func (e *enc) str8(s string) {
	if len(s) > MaxName {
		panic(fmt.Sprintf("meta: name of %d bytes (max %d)", len(s), MaxName))
	}
	e.b = append(e.b, byte(len(s)))
	e.b = append(e.b, s...)
}

// set appends a list of names (u8 count, then str8 each).
func (e *enc) set(names []string) {
	if len(names) > MaxSet {
		panic(fmt.Sprintf("meta: set of %d names (max %d)", len(names), MaxSet))
	}
	e.u8(uint8(len(names)))
	for _, n := range names {
		e.str8(n)
	}
}

func (e *enc) flag(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

// dec reads big-endian fields with a sticky error that names what was
// being decoded, the field and its offset; after the first failure every
// read returns zero values and the caller checks err once.
type dec struct {
	b    []byte
	off  int
	what string
	err  error
	// names, when set, interns the names of sets (nodes): a snapshot
	// repeats a few node names in every streamlet, so each is allocated
	// once, not once per streamlet.
	names map[string]string
}

func (d *dec) need(n int, field string) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || n > len(d.b)-d.off {
		d.err = fmt.Errorf("%w: %s: %s at offset %d needs %d bytes, %d left",
			ErrMalformed, d.what, field, d.off, n, len(d.b)-d.off)
		return false
	}
	return true
}

func (d *dec) failf(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s: %s", ErrMalformed, d.what, fmt.Sprintf(format, args...))
	}
}

func (d *dec) u8(field string) uint8 {
	if !d.need(1, field) {
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *dec) u32(field string) uint32 {
	if !d.need(4, field) {
		return 0
	}
	v := binary.BigEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

func (d *dec) u64(field string) uint64 {
	if !d.need(8, field) {
		return 0
	}
	v := binary.BigEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

func (d *dec) i64(field string) int64 { return int64(d.u64(field)) }

func (d *dec) flag(field string) bool {
	off := d.off
	switch d.u8(field) {
	case 0:
		return false
	case 1:
		return true
	default:
		d.failf("%s at offset %d is neither 0 nor 1", field, off)
		return false
	}
}

// str8 reads a name: one length byte (at most MaxName by construction),
// then that many bytes, copied.
func (d *dec) str8(field string) string {
	n := int(d.u8(field + " length"))
	if !d.need(n, field) {
		return ""
	}
	s := string(d.b[d.off : d.off+n])
	d.off += n
	return s
}

// setName reads a name of a set: name, interned in d.names if set.
func (d *dec) setName(field string) string {
	if d.names == nil {
		return d.name(field)
	}
	off := d.off
	n := int(d.u8(field + " length"))
	if !d.need(n, field) {
		return ""
	}
	if n == 0 {
		d.failf("%s at offset %d is empty", field, off)
		return ""
	}
	b := d.b[d.off : d.off+n]
	d.off += n
	if s, ok := d.names[string(b)]; ok {
		return s
	}
	s := string(b)
	d.names[s] = s
	return s
}

// name reads a non-empty name.
func (d *dec) name(field string) string {
	off := d.off
	s := d.str8(field)
	if d.err == nil && s == "" {
		d.failf("%s at offset %d is empty", field, off)
	}
	return s
}

// set reads a list of non-empty, distinct names, at most MaxSet.
func (d *dec) set(field string) []string {
	off := d.off
	n := int(d.u8(field + " count"))
	if d.err != nil || n == 0 {
		return nil
	}
	if n > MaxSet {
		d.failf("%s at offset %d has %d names (max %d)", field, off, n, MaxSet)
		return nil
	}
	out := make([]string, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		s := d.setName(field)
		for _, o := range out {
			if o == s {
				d.failf("%s at offset %d names %q twice", field, off, s)
			}
		}
		out = append(out, s)
	}
	if d.err != nil {
		return nil
	}
	return out
}

// count reads a u32 count of entries each at least min bytes long and
// checks it against max and against the bytes left, before the caller
// allocates for them.
func (d *dec) count(field string, max, min int) int {
	off := d.off
	n := int(d.u32(field))
	if d.err != nil {
		return 0
	}
	if n > max {
		d.failf("%s at offset %d is %d (max %d)", field, off, n, max)
		return 0
	}
	if n*min > len(d.b)-d.off {
		d.failf("%s at offset %d is %d entries of at least %d bytes, %d bytes left", field, off, n, min, len(d.b)-d.off)
		return 0
	}
	return n
}

// done returns the sticky error, or an error if bytes are left over.
func (d *dec) done() error {
	if d.err == nil && d.off != len(d.b) {
		d.err = fmt.Errorf("%w: %s: %d trailing bytes after offset %d", ErrMalformed, d.what, len(d.b)-d.off, d.off)
	}
	return d.err
}
