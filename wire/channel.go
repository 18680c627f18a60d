package wire

import (
	"fmt"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// ValidChannel reports whether name is a valid channel name: 1..255 bytes of
// valid UTF-8 containing no white space (unicode.IsSpace) and no control
// character (unicode.IsControl). The error wraps ErrInvalidChannel and says
// what is wrong and where. It does not allocate when name is valid and is
// safe for concurrent use.
func ValidChannel(name []byte) error {
	if len(name) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidChannel)
	}
	if len(name) > MaxChannelLen {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidChannel, len(name), MaxChannelLen)
	}
	for i := 0; i < len(name); {
		c := name[i]
		if c < utf8.RuneSelf {
			// ASCII fast path: printable and not a space.
			if c <= ' ' || c == 0x7F {
				return fmt.Errorf("%w: byte 0x%02X at offset %d is white space or a control character", ErrInvalidChannel, c, i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(name[i:])
		if r == utf8.RuneError && size == 1 {
			return fmt.Errorf("%w: invalid UTF-8 at offset %d", ErrInvalidChannel, i)
		}
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%w: %U at offset %d is white space or a control character", ErrInvalidChannel, r, i)
		}
		i += size
	}
	return nil
}

// ValidChannelString is ValidChannel for a string, without copying it.
func ValidChannelString(name string) error {
	// ValidChannel only reads the bytes and does not retain them, so viewing
	// the string's immutable bytes as a slice is safe.
	return ValidChannel(unsafe.Slice(unsafe.StringData(name), len(name)))
}
