package wire

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// Sealed records (PROTOCOL.md 9.8). After NODE_WELCOME each direction of a
// node connection is a sequence of NODE_SEALED records; the plaintext of
// the records, concatenated, is the direction's stream of ordinary frames
// (a frame may span records, a record may hold many frames):
//
//	off  size  field
//	0    4     length L = ciphertext + 16 (17 .. MaxSealedPlain+16)
//	4    1     type NODE_SEALED (0x4F)
//	5    1     flags 0
//	6    4     sequence number of the record, low 32 bits
//	10   L-16  AES-256-GCM ciphertext
//	L-6  16    GCM tag
//
// The key is the direction's key from DeriveNodeKeys; the 12-byte nonce is
// 4 zero bytes and the record's u64 sequence number (0 for the first record
// of a direction, then 1, 2, ...), never sent; the additional data is the
// 10 header bytes. A record that is reordered, replayed, dropped, cut or
// changed in any bit fails to open, and the receiver closes the
// connection: there is no recovery inside one connection.

// Record limits.
const (
	// MaxSealedPlain is the largest plaintext of one record.
	MaxSealedPlain = 64 << 10
	// SealTagLen is the GCM tag at the end of every record.
	SealTagLen = 16
	// SealOverhead is what a record adds to its plaintext.
	SealOverhead = HeaderLen + SealTagLen
	// maxSealedLen is the largest record length field.
	maxSealedLen = MaxSealedPlain + SealTagLen
)

// ErrSeal is wrapped by every error about a record that does not open: a
// wrong type, flags or length, a sequence number out of order, or a failed
// authentication. It wraps ErrMalformed.
var ErrSeal = fmt.Errorf("%w: sealed record refused", ErrMalformed)

// errSealExhausted: a direction used every sequence number.
var errSealExhausted = errors.New("wire: sealed records: sequence numbers exhausted")

func newGCM(key [NodeKeyLen]byte) cipher.AEAD {
	b, err := aes.NewCipher(key[:])
	if err != nil {
		panic("wire: AES-256: " + err.Error()) // only a wrong key length fails
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		panic("wire: GCM: " + err.Error())
	}
	return g
}

// Sealer seals one direction's plaintext into records. It is not safe for
// concurrent use; one goroutine (the connection's writer) owns it.
type Sealer struct {
	aead  cipher.AEAD
	seq   uint64
	nonce [12]byte
	err   error
}

// NewSealer returns the Sealer of a direction whose key is key.
func NewSealer(key [NodeKeyLen]byte) *Sealer { return &Sealer{aead: newGCM(key)} }

// Seq returns the sequence number of the next record.
func (s *Sealer) Seq() uint64 { return s.seq }

// Seal appends to dst the records carrying plain (none if plain is empty),
// each with at most MaxSealedPlain bytes of it. It fails only once the
// sequence numbers are used up (2^64 records).
func (s *Sealer) Seal(dst, plain []byte) ([]byte, error) {
	return s.SealVec(dst, [][]byte{plain})
}

// SealVec is Seal of the concatenation of vec, copying each byte once
// (into dst, where it is encrypted in place).
func (s *Sealer) SealVec(dst []byte, vec [][]byte) ([]byte, error) {
	total := 0
	for _, b := range vec {
		total += len(b)
	}
	if total == 0 {
		return dst, s.err
	}
	records := (total + MaxSealedPlain - 1) / MaxSealedPlain
	dst = slices.Grow(dst, total+records*SealOverhead)
	i, off := 0, 0 // next byte: vec[i][off]
	for left := total; left > 0; {
		if s.err != nil {
			return dst, s.err
		}
		n := min(left, MaxSealedPlain)
		left -= n
		start := len(dst)
		dst = AppendHeader(dst, TypeNodeSealed, 0, uint32(s.seq), n+SealTagLen)
		pstart := len(dst)
		for want := n; want > 0; {
			b := vec[i][off:]
			if len(b) > want {
				b = b[:want]
			}
			dst = append(dst, b...)
			want -= len(b)
			off += len(b)
			if off == len(vec[i]) {
				i, off = i+1, 0
			}
		}
		binary.BigEndian.PutUint64(s.nonce[4:], s.seq)
		// In place: the plaintext's storage takes the ciphertext, and the
		// capacity reserved above takes the tag.
		out := s.aead.Seal(dst[pstart:pstart], s.nonce[:], dst[pstart:], dst[start:pstart])
		dst = dst[:pstart+len(out)]
		if s.seq == math.MaxUint64 {
			s.err = errSealExhausted
		}
		s.seq++
	}
	return dst, nil
}

// Opener opens one direction's records. Its error is sticky: after one
// record fails, every later call fails. It is not safe for concurrent use;
// one goroutine (the connection's reader) owns it.
type Opener struct {
	aead  cipher.AEAD
	seq   uint64
	off   uint64 // stream offset of the next record
	nonce [12]byte
	err   error
}

// NewOpener returns the Opener of a direction whose key is key.
func NewOpener(key [NodeKeyLen]byte) *Opener { return &Opener{aead: newGCM(key)} }

// Seq returns the sequence number of the next record.
func (o *Opener) Seq() uint64 { return o.seq }

// Err returns the sticky error, if any.
func (o *Opener) Err() error { return o.err }

func (o *Opener) fail(format string, args ...any) error {
	o.err = fmt.Errorf("%w: record %d at stream offset %d: %s", ErrSeal, o.seq, o.off, fmt.Sprintf(format, args...))
	return o.err
}

// Open opens the record at the start of src and appends its plaintext to
// dst; n is the number of bytes of src it took. When src holds no whole
// record it returns ErrIncomplete (unwrapped) and n 0, but only after the
// header, once present, was checked: type NODE_SEALED, flags 0, a length
// within 17..MaxSealedPlain+16 and the expected sequence number. So a
// caller buffers at most HeaderLen + MaxSealedPlain + SealTagLen bytes of
// one record. dst must not overlap src.
func (o *Opener) Open(dst, src []byte) (out []byte, n int, err error) {
	if o.err != nil {
		return dst, 0, o.err
	}
	if len(src) < HeaderLen {
		return dst, 0, ErrIncomplete
	}
	l := binary.BigEndian.Uint32(src)
	switch {
	case Type(src[4]) != TypeNodeSealed:
		return dst, 0, o.fail("type %v, want NODE_SEALED", Type(src[4]))
	case src[5] != 0:
		return dst, 0, o.fail("flags 0x%02x, want 0", src[5])
	case l <= SealTagLen || l > maxSealedLen:
		return dst, 0, o.fail("length %d outside %d..%d", l, SealTagLen+1, maxSealedLen)
	case binary.BigEndian.Uint32(src[6:]) != uint32(o.seq):
		return dst, 0, o.fail("sequence %d, want %d (low 32 bits)", binary.BigEndian.Uint32(src[6:]), uint32(o.seq))
	}
	n = HeaderLen + int(l)
	if len(src) < n {
		return dst, 0, ErrIncomplete
	}
	binary.BigEndian.PutUint64(o.nonce[4:], o.seq)
	start := len(dst)
	out, aerr := o.aead.Open(dst, o.nonce[:], src[HeaderLen:n], src[:HeaderLen])
	if aerr != nil {
		return dst[:start], 0, o.fail("authentication failed")
	}
	if o.seq == math.MaxUint64 {
		o.err = errSealExhausted
	}
	o.seq++
	o.off += uint64(n)
	return out, n, nil
}

// OpenAll opens every whole record at the start of src, appending their
// plaintext to dst; n is the number of bytes taken. A partial record left
// at the end is not an error (its header has been checked).
func (o *Opener) OpenAll(dst, src []byte) (out []byte, n int, err error) {
	for {
		var m int
		dst, m, err = o.Open(dst, src[n:])
		if err == ErrIncomplete {
			return dst, n, nil
		}
		if err != nil {
			return dst, n, err
		}
		n += m
	}
}

// SealedConn carries a plaintext byte stream over rw in sealed records:
// what is written is sealed, what is read is opened. One goroutine may
// Read while another Writes; each side alone is not safe for concurrent
// use. Any error is sticky for its side; a record that does not open
// fails Read with an error wrapping ErrSeal, after which the caller should
// close rw.
type SealedConn struct {
	rw io.ReadWriter
	s  *Sealer
	o  *Opener

	raw   []byte // records read, not yet opened: raw[:rn]
	rn    int
	plain []byte // opened, not yet read: plain[pr:]
	pr    int
	rerr  error

	wbuf []byte
	werr error
}

// NewSealedConn returns a SealedConn over rw that seals with send and
// opens with receive; buffered holds bytes already read from rw (after the
// handshake) that belong to the record stream.
func NewSealedConn(rw io.ReadWriter, send, receive [NodeKeyLen]byte, buffered []byte) *SealedConn {
	c := &SealedConn{rw: rw, s: NewSealer(send), o: NewOpener(receive)}
	c.raw = append(make([]byte, 0, max(len(buffered), 4<<10)), buffered...)
	c.rn = len(buffered)
	c.raw = c.raw[:cap(c.raw)]
	return c
}

// Write seals p and writes the records to the underlying stream.
func (c *SealedConn) Write(p []byte) (int, error) {
	if c.werr != nil {
		return 0, c.werr
	}
	var err error
	c.wbuf, err = c.s.Seal(c.wbuf[:0], p)
	if err == nil {
		_, err = c.rw.Write(c.wbuf)
	}
	if err != nil {
		c.werr = err
		return 0, err
	}
	if cap(c.wbuf) > 1<<20 {
		c.wbuf = nil
	}
	return len(p), nil
}

// Read returns opened plaintext, reading and opening records as needed.
func (c *SealedConn) Read(p []byte) (int, error) {
	for c.pr == len(c.plain) {
		c.plain, c.pr = c.plain[:0], 0
		var n int
		var err error
		c.plain, n, err = c.o.OpenAll(c.plain, c.raw[:c.rn])
		c.rn = copy(c.raw, c.raw[n:c.rn])
		if err != nil {
			c.rerr = err
			return 0, err
		}
		if len(c.plain) > 0 {
			break
		}
		if c.rerr != nil {
			if c.rerr == io.EOF && c.rn > 0 {
				return 0, io.ErrUnexpectedEOF
			}
			return 0, c.rerr
		}
		// Need more: the header (checked by OpenAll once present) bounds
		// the record, so the buffer never grows past one record.
		need := HeaderLen
		if c.rn >= HeaderLen {
			need += int(binary.BigEndian.Uint32(c.raw))
		}
		if need > len(c.raw) {
			c.raw = slices.Grow(c.raw[:c.rn], need-c.rn)
			c.raw = c.raw[:cap(c.raw)]
		}
		m, err := c.rw.Read(c.raw[c.rn:])
		c.rn += m
		if err != nil {
			c.rerr = err
		}
	}
	n := copy(p, c.plain[c.pr:])
	c.pr += n
	return n, nil
}
