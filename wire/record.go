package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Records with headers and message ids (PROTOCOL.md 2.14).
//
// A record of a DATA, NODE_APPEND or NODE_FEED record run, and of a
// streamlet buffer, starts with a u32 length word. Its top bit (RecordExt)
// says what the length counts:
//
//	bit 31 = 0: L = bits 0..30, then L payload bytes (the v1 record)
//	bit 31 = 1: L = bits 0..30, then L bytes of an extended record body:
//
//	off   size  field
//	0     1     ext flags: 0x01 ExtMsgID, 0x02 ExtHeaders; at least one,
//	            no other bit
//	...   1     idLen I, 1..255             (if ExtMsgID)
//	...   I     message id                  (if ExtMsgID)
//	...   2     headersLen H, 1..MaxHeadersLen (if ExtHeaders)
//	...   H     header block: entries back to back, each
//	            u8 keyLen K (1..255), K key bytes, u16 valueLen V, V bytes
//	...   ...   payload: the rest of the L bytes
//
// The same extended body follows the channel of a PUBLISH that carries flag
// FlagExt. A server stores it as it came, so a subscriber that negotiated
// FeatureHeaders gets the publisher's bytes; one that did not gets the
// record with the extension removed (the payload alone).

// Record layout constants.
const (
	// RecordExt is the length word's top bit: the record is extended.
	RecordExt uint32 = 1 << 31
	// RecordLenMask extracts the length from a length word.
	RecordLenMask uint32 = RecordExt - 1

	// ExtMsgID says an extended record body carries a message id.
	ExtMsgID uint8 = 0x01
	// ExtHeaders says an extended record body carries a header block.
	ExtHeaders uint8 = 0x02

	// MaxMsgIDLen is the longest message id.
	MaxMsgIDLen = 255
	// MaxHeaders is the most header entries one message carries.
	MaxHeaders = 64
	// MaxHeadersLen is the largest header block, in bytes.
	MaxHeadersLen = 8192
	// MaxHeaderKeyLen is the longest header key.
	MaxHeaderKeyLen = 255
)

// HeaderField is one header entry of a message. Keys are compared byte for
// byte; a key may repeat (the entries keep their order).
type HeaderField struct {
	Key, Value string
}

// Ext is a decoded extended record body. Its slices alias the body.
type Ext struct {
	MsgID   []byte // nil when the record has no message id
	Headers []byte // the raw header block, nil when none; iterate with NextHeader
	Payload []byte
}

// HeadersLen returns the encoded size of a header block holding hs (0 for
// none). It does not check limits: see CheckHeaders.
func HeadersLen(hs []HeaderField) int {
	n := 0
	for _, h := range hs {
		n += 1 + len(h.Key) + 2 + len(h.Value)
	}
	return n
}

// ExtLen returns the size of the extended record body for a message id,
// headers and a payload of payloadLen bytes, or payloadLen when id and hs
// are both empty (the record is then a plain one).
func ExtLen(id []byte, hs []HeaderField, payloadLen int) int {
	if len(id) == 0 && len(hs) == 0 {
		return payloadLen
	}
	n := 1 + payloadLen
	if len(id) > 0 {
		n += 1 + len(id)
	}
	if len(hs) > 0 {
		n += 2 + HeadersLen(hs)
	}
	return n
}

// AppendExt appends an extended record body (without the length word):
// ext flags, the id if any, the headers if any, then the payload. id and hs
// must not both be empty (use the payload alone then), and they must pass
// CheckMsgID and CheckHeaders; values the format cannot carry panic.
func AppendExt(dst []byte, id []byte, hs []HeaderField, payload []byte) []byte {
	var f uint8
	if len(id) > 0 {
		f |= ExtMsgID
	}
	if len(hs) > 0 {
		f |= ExtHeaders
	}
	if f == 0 {
		panic("wire: AppendExt without a message id or headers")
	}
	dst = append(dst, f)
	if len(id) > 0 {
		mustFit(TypePublish, "message id length", len(id), MaxMsgIDLen)
		dst = append(dst, byte(len(id)))
		dst = append(dst, id...)
	}
	if len(hs) > 0 {
		hl := HeadersLen(hs)
		mustFit(TypePublish, "headers length", hl, math.MaxUint16)
		dst = binary.BigEndian.AppendUint16(dst, uint16(hl))
		for _, h := range hs {
			mustFit(TypePublish, "header key length", len(h.Key), MaxHeaderKeyLen)
			mustFit(TypePublish, "header value length", len(h.Value), math.MaxUint16)
			dst = append(dst, byte(len(h.Key)))
			dst = append(dst, h.Key...)
			dst = binary.BigEndian.AppendUint16(dst, uint16(len(h.Value)))
			dst = append(dst, h.Value...)
		}
	}
	return append(dst, payload...)
}

// ParseExt decodes an extended record body and checks its layout: the ext
// flags, the id and header lengths, and that the header block is a whole
// number of entries. It does not judge header keys and values (that is
// CheckHeaderBlock). frame names the frame in errors. It does not allocate
// on success.
func ParseExt(body []byte, frame Type) (Ext, error) {
	e, err, _ := parseExt(body, frame, false)
	return e, err
}

// ParseExtChecked is ParseExt that also judges the header keys and values
// as CheckHeaderBlock does, in the same walk over the block (the server's
// publish path). A layout error wraps ErrMalformed and wins over a key or
// value error anywhere in the block; a record whose layout is sound but
// whose keys or values are not is returned with an invalid error wrapping
// ErrInvalidHeaders.
func ParseExtChecked(body []byte, frame Type) (e Ext, malformed, invalid error) {
	return parseExt(body, frame, true)
}

func parseExt(body []byte, frame Type, judge bool) (Ext, error, error) {
	d := decoder{b: body, frame: frame}
	f := d.u8("ext flags")
	switch {
	case d.err != nil:
	case f == 0:
		d.failf("extended record without a message id or headers")
	case f&^(ExtMsgID|ExtHeaders) != 0:
		d.failf("ext flags 0x%02x: undefined bits", f)
	}
	var e Ext
	if d.err == nil && f&ExtMsgID != 0 {
		n := d.u8("message id length")
		if d.err == nil && n == 0 {
			d.failf("empty message id")
		}
		e.MsgID = d.bytes(int(n), "message id")
	}
	if d.err == nil && f&ExtHeaders != 0 {
		n := d.u16("headers length")
		if d.err == nil && (n == 0 || n > MaxHeadersLen) {
			d.failf("headers length %d outside 1..%d", n, MaxHeadersLen)
		}
		e.Headers = d.bytes(int(n), "header block")
		if d.err == nil {
			malformed, invalid := checkHeaderLayout(e.Headers, frame, judge)
			if malformed != nil {
				return Ext{}, malformed, nil
			}
			e.Payload = d.rest()
			return e, nil, invalid
		}
	}
	e.Payload = d.rest()
	if d.err != nil {
		return Ext{}, d.err, nil
	}
	return e, nil, nil
}

// checkHeaderLayout checks that block is 1..MaxHeaders whole entries with
// non-empty keys, and with judge the keys and values too (the first
// invalid one is reported, after the whole layout passed).
func checkHeaderLayout(block []byte, frame Type, judge bool) (malformed, invalid error) {
	n := 0
	for rest := block; len(rest) > 0; n++ {
		if n == MaxHeaders {
			return fmt.Errorf("%w: %v: more than %d headers", ErrMalformed, frame, MaxHeaders), nil
		}
		k, v, r, ok := NextHeader(rest)
		if !ok {
			return fmt.Errorf("%w: %v: header %d overruns the header block", ErrMalformed, frame, n), nil
		}
		if len(k) == 0 {
			return fmt.Errorf("%w: %v: header %d has an empty key", ErrMalformed, frame, n), nil
		}
		if judge && invalid == nil {
			invalid = checkEntry(k, v)
		}
		rest = r
	}
	return nil, invalid
}

// checkEntry judges one header entry's key and value.
func checkEntry(k, v []byte) error {
	for i, c := range k {
		if !validKeyByte(c) {
			return fmt.Errorf("%w: key %q: byte 0x%02x at %d is not a token character", ErrInvalidHeaders, k, c, i)
		}
	}
	if err := checkValue(v); err != nil {
		return fmt.Errorf("header %q: %w", k, err)
	}
	return nil
}

// NextHeader splits the first entry off a header block. ok is false when
// block is empty or does not start with a whole entry. key and value alias
// block. It does not allocate.
func NextHeader(block []byte) (key, value, rest []byte, ok bool) {
	if len(block) < 1 {
		return nil, nil, block, false
	}
	k := int(block[0])
	if len(block) < 1+k+2 {
		return nil, nil, block, false
	}
	v := int(binary.BigEndian.Uint16(block[1+k:]))
	end := 1 + k + 2 + v
	if len(block) < end {
		return nil, nil, block, false
	}
	return block[1 : 1+k : 1+k], block[3+k : end : end], block[end:], true
}

// ErrInvalidHeaders is wrapped by CheckHeaders' and CheckMsgID's errors. On
// a well-formed PUBLISH it is not malformed: the server answers ERROR
// INVALID_HEADERS and carries on.
var ErrInvalidHeaders = fmt.Errorf("wire: invalid message headers")

// validKeyByte reports whether c may appear in a header key: the token
// characters of HTTP (RFC 9110, 5.6.2), so that keys such as traceparent or
// Content-Type pass and no key holds '=' , ':' or white space.
func validKeyByte(c byte) bool { return tokenChars[c] }

// tokenChars is validKeyByte's table (one load per key byte instead of a
// chain of comparisons); it is never written after its initialisation.
var tokenChars = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		switch b := byte(c); {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
			t[c] = true
		case strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0:
			t[c] = true
		}
	}
	return t
}()

// ExtMsgIDOf returns the message id of an extended record body that
// ParseExt accepted (nil if it has none), reading only the flags and the
// id's length: the host's append path, which must not parse a body the
// gateway checked again. On a malformed body it returns nil or a prefix of
// the body; it never panics.
func ExtMsgIDOf(body []byte) []byte {
	if len(body) < 2 || body[0]&ExtMsgID == 0 {
		return nil
	}
	n := int(body[1])
	if n == 0 || len(body) < 2+n {
		return nil
	}
	return body[2 : 2+n : 2+n]
}

// CheckHeaderKey reports whether key is a valid header key: 1..255 token
// characters.
func CheckHeaderKey(key string) error {
	if len(key) == 0 || len(key) > MaxHeaderKeyLen {
		return fmt.Errorf("%w: key length %d outside 1..%d", ErrInvalidHeaders, len(key), MaxHeaderKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if !validKeyByte(key[i]) {
			return fmt.Errorf("%w: key %q: byte 0x%02x at %d is not a token character", ErrInvalidHeaders, key, key[i], i)
		}
	}
	return nil
}

// checkValue reports whether v is valid UTF-8 without control characters
// other than tab. Eight bytes at a time while they are printable ASCII
// (SWAR: a byte b < 0x20 sets bit 7 of b - 0x20 when no lower byte
// borrowed; 0x7f and up have bit 7 set after adding 1, or before); a word
// that has another byte is checked byte by byte from there, and utf8 only
// when a byte is not ASCII.
func checkValue(v []byte) error {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(v); i += 8 {
		w := binary.LittleEndian.Uint64(v[i:])
		if (w|(w-0x20*ones)|(w+ones))&highs != 0 {
			break
		}
	}
	var hi byte
	for ; i < len(v); i++ {
		c := v[i]
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return fmt.Errorf("%w: value has control character 0x%02x at %d", ErrInvalidHeaders, c, i)
		}
		hi |= c
	}
	if hi >= 0x80 && !utf8.Valid(v) {
		return fmt.Errorf("%w: value is not valid UTF-8", ErrInvalidHeaders)
	}
	return nil
}

// checkValueString is checkValue of a string, read in place (the bytes
// are only read, and not kept).
func checkValueString(v string) error {
	return checkValue(unsafe.Slice(unsafe.StringData(v), len(v)))
}

// CheckHeaders validates headers before they are sent: at most MaxHeaders
// entries, valid keys, values of valid UTF-8 without control characters
// (tab allowed), and a block of at most MaxHeadersLen bytes.
func CheckHeaders(hs []HeaderField) error {
	if len(hs) > MaxHeaders {
		return fmt.Errorf("%w: %d headers, at most %d", ErrInvalidHeaders, len(hs), MaxHeaders)
	}
	if n := HeadersLen(hs); n > MaxHeadersLen {
		return fmt.Errorf("%w: header block of %d bytes, at most %d", ErrInvalidHeaders, n, MaxHeadersLen)
	}
	for _, h := range hs {
		if err := CheckHeaderKey(h.Key); err != nil {
			return err
		}
		if err := checkValueString(h.Value); err != nil {
			return fmt.Errorf("header %q: %w", h.Key, err)
		}
	}
	return nil
}

// CheckHeaderBlock validates the keys and values of a header block whose
// layout ParseExt accepted, as CheckHeaders does for fields. It does not
// allocate on success.
func CheckHeaderBlock(block []byte) error {
	for rest := block; len(rest) > 0; {
		k, v, r, ok := NextHeader(rest)
		if !ok {
			return fmt.Errorf("%w: truncated header block", ErrInvalidHeaders)
		}
		if err := checkEntry(k, v); err != nil {
			return err
		}
		rest = r
	}
	return nil
}

// CheckMsgID validates a message id: 1..MaxMsgIDLen bytes of any value.
func CheckMsgID(id []byte) error {
	if len(id) == 0 || len(id) > MaxMsgIDLen {
		return fmt.Errorf("%w: message id length %d outside 1..%d", ErrInvalidHeaders, len(id), MaxMsgIDLen)
	}
	return nil
}

// AppendHeaderFields appends the entries of a header block to dst as
// HeaderFields (two string allocations per entry). The block must have been
// accepted by ParseExt.
func AppendHeaderFields(dst []HeaderField, block []byte) []HeaderField {
	for rest := block; ; {
		k, v, r, ok := NextHeader(rest)
		if !ok {
			return dst
		}
		dst = append(dst, HeaderField{Key: string(k), Value: string(v)})
		rest = r
	}
}

// StripRun appends to dst the record run of count records in run with
// every extended record replaced by a plain record of its payload, for a
// receiver that did not negotiate FeatureHeaders. run must have been
// validated (the engine's stored runs, or DecodeData's). It reports false if
// run is not such a run.
func StripRun(dst []byte, run []byte) ([]byte, bool) {
	for len(run) > 0 {
		body, ext, rest, ok := NextRecordExt(run)
		if !ok {
			return dst, false
		}
		if ext {
			e, err := ParseExt(body, TypeData)
			if err != nil {
				return dst, false
			}
			body = e.Payload
		}
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
		dst = append(dst, body...)
		run = rest
	}
	return dst, true
}

// StrippedLen returns the size StripRun's output would have: the run's
// size minus every extended record's extension. ok is false if run is not a
// valid run.
func StrippedLen(run []byte) (n int, hasExt bool, ok bool) {
	for len(run) > 0 {
		body, ext, rest, okr := NextRecordExt(run)
		if !okr {
			return 0, false, false
		}
		if ext {
			e, err := ParseExt(body, TypeData)
			if err != nil {
				return 0, false, false
			}
			body = e.Payload
			hasExt = true
		}
		n += RecordHeaderLen + len(body)
		run = rest
	}
	return n, hasExt, true
}
