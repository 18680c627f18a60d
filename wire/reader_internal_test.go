package wire

import (
	"bytes"
	"errors"
	"testing"
)

// TestReaderBufferBounded: the buffer never grows beyond HeaderLen+maxBody,
// even when frames of exactly maxBody arrive, and a header declaring more
// than the limit does not grow it at all.
func TestReaderBufferBounded(t *testing.T) {
	const maxBody = 100
	var stream []byte
	for i := range 50 {
		stream = AppendPublish(stream, uint32(i), 0, "c", make([]byte, maxBody-2))
		stream = AppendPing(stream, uint32(i))
	}
	stream = AppendHeader(stream, TypePublish, 0, 1, 1<<30)
	r := NewReader(bytes.NewReader(stream), maxBody)
	for {
		_, _, err := r.Next()
		if len(r.buf) > HeaderLen+maxBody {
			t.Fatalf("buffer grew to %d > %d", len(r.buf), HeaderLen+maxBody)
		}
		if err != nil {
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("err = %v, want ErrTooLarge", err)
			}
			return
		}
	}
}
