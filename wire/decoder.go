package wire

import (
	"encoding/binary"
	"fmt"
)

// decoder reads big-endian fields from one frame body with a sticky error:
// after the first short read every later read returns zero values, and the
// caller checks err once at the end (the franz-go kbin.Reader style). It
// lives on the caller's stack; error values are built only on failure, so a
// successful decode does not allocate.
type decoder struct {
	b     []byte
	off   int
	frame Type
	err   error
}

// need reports whether n more bytes are present, recording an error naming
// field if they are not.
func (d *decoder) need(n int, field string) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || n > len(d.b)-d.off {
		d.err = fmt.Errorf("%w: %v: %s at offset %d needs %d bytes, body has %d",
			ErrMalformed, d.frame, field, d.off, n, len(d.b))
		return false
	}
	return true
}

// failf records a malformed-input error unless one is already recorded.
func (d *decoder) failf(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %v: %s", ErrMalformed, d.frame, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) u8(field string) uint8 {
	if !d.need(1, field) {
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) u16(field string) uint16 {
	if !d.need(2, field) {
		return 0
	}
	v := binary.BigEndian.Uint16(d.b[d.off:])
	d.off += 2
	return v
}

func (d *decoder) u32(field string) uint32 {
	if !d.need(4, field) {
		return 0
	}
	v := binary.BigEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

func (d *decoder) u64(field string) uint64 {
	if !d.need(8, field) {
		return 0
	}
	v := binary.BigEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

// bytes returns the next n bytes as a capacity-capped sub-slice of the body.
func (d *decoder) bytes(n int, field string) []byte {
	if !d.need(n, field) {
		return nil
	}
	s := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return s
}

// rest returns the remaining bytes (possibly empty) as a capped sub-slice.
func (d *decoder) rest() []byte {
	if d.err != nil {
		return nil
	}
	s := d.b[d.off:len(d.b):len(d.b)]
	d.off = len(d.b)
	return s
}

// exact returns the sticky error, or an error if bytes are left over in a
// frame whose body length is fixed by its fields.
func (d *decoder) exact() error {
	if d.err == nil && d.off != len(d.b) {
		d.err = fmt.Errorf("%w: %v: %d trailing bytes after offset %d (body has %d)",
			ErrMalformed, d.frame, len(d.b)-d.off, d.off, len(d.b))
	}
	return d.err
}
