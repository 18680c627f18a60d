package wire_test

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// chunkReader returns its data in pieces of the given sizes (cycling), then
// err (io.EOF if nil).
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
	err   error
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.sizes) > 0 {
		n = min(n, c.sizes[c.i%len(c.sizes)])
		c.i++
	}
	n = copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func allValid() ([]byte, []msg) {
	var stream []byte
	var want []msg
	for _, tc := range validCases() {
		stream = append(stream, tc.frame...)
		want = append(want, tc.want)
	}
	return stream, want
}

// readAll drains r, decoding every frame, and returns the frames and the
// final error.
func readAll(t *testing.T, r *wire.Reader) ([]msg, error) {
	t.Helper()
	var got []msg
	for {
		h, body, err := r.Next()
		if err != nil {
			return got, err
		}
		v, err := decodeAny(h, body)
		if err != nil {
			t.Fatalf("frame %d: %v", len(got), err)
		}
		got = append(got, msg{h, v})
	}
}

func TestReaderPieces(t *testing.T) {
	stream, want := allValid()
	for _, sizes := range [][]int{nil, {1}, {2, 3}, {7, 1, 64}, {9, 10, 11}, {4096}} {
		r := wire.NewReader(&chunkReader{data: stream, sizes: sizes}, testMaxBody)
		got, err := readAll(t, r)
		if err != io.EOF {
			t.Fatalf("sizes %v: final error %v, want io.EOF", sizes, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("sizes %v: got %d frames %v\nwant %v", sizes, len(got), got, want)
		}
	}
}

// blockingReader returns ErrWouldBlock before every piece of chunkReader
// (and, when withBytes, also together with the piece), as a non-blocking
// socket source does.
type blockingReader struct {
	chunkReader
	withBytes bool
	blocked   bool // the last call returned ErrWouldBlock alone
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if !b.blocked {
		b.blocked = true
		return 0, wire.ErrWouldBlock
	}
	b.blocked = false
	n, err := b.chunkReader.Read(p)
	if err == nil && b.withBytes && len(b.data) > 0 {
		err = wire.ErrWouldBlock
	}
	return n, err
}

// TestReaderWouldBlockNotSticky: ErrWouldBlock reaches the caller each time
// no whole frame is buffered, keeps the partial frame, and the stream
// decodes as it does from a blocking source.
func TestReaderWouldBlockNotSticky(t *testing.T) {
	stream, want := allValid()
	for _, withBytes := range []bool{false, true} {
		for _, sizes := range [][]int{{1}, {2, 3}, {7, 1, 64}, {4096}} {
			src := &blockingReader{chunkReader: chunkReader{data: stream, sizes: sizes}, withBytes: withBytes}
			r := wire.NewReader(src, testMaxBody)
			var got []msg
			blocks := 0
			for {
				h, body, err := r.Next()
				if err == wire.ErrWouldBlock {
					if blocks++; blocks > 2*len(stream)+2 {
						t.Fatalf("sizes %v: ErrWouldBlock without end", sizes)
					}
					continue
				}
				if err != nil {
					if err != io.EOF {
						t.Fatalf("sizes %v: final error %v, want io.EOF", sizes, err)
					}
					break
				}
				v, err := decodeAny(h, body)
				if err != nil {
					t.Fatalf("frame %d: %v", len(got), err)
				}
				got = append(got, msg{h, v})
			}
			if blocks == 0 {
				t.Fatalf("sizes %v: ErrWouldBlock never returned", sizes)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("sizes %v withBytes %v: got %d frames\nwant %d", sizes, withBytes, len(got), len(want))
			}
		}
	}
}

func TestReaderUnexpectedEOF(t *testing.T) {
	stream, want := allValid()
	cut := stream[:len(stream)-1]
	r := wire.NewReader(&chunkReader{data: cut, sizes: []int{5}}, testMaxBody)
	got, err := readAll(t, r)
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	if !reflect.DeepEqual(got, want[:len(want)-1]) {
		t.Fatalf("got %d frames, want the %d complete ones", len(got), len(want)-1)
	}
}

func TestReaderSourceErrorAfterFrames(t *testing.T) {
	boom := errors.New("boom")
	stream, want := allValid()
	r := wire.NewReader(&chunkReader{data: stream, err: boom}, testMaxBody)
	got, err := readAll(t, r)
	if err != boom || len(got) != len(want) {
		t.Fatalf("got %d frames, err %v; want %d frames then boom", len(got), err, len(want))
	}
	if _, _, err := r.Next(); err != boom {
		t.Fatalf("error not sticky: %v", err)
	}
}

func TestReaderTooLargeIsSticky(t *testing.T) {
	stream := append(wire.AppendPing(nil, 1), wire.AppendPublish(nil, 2, 0, "c", make([]byte, 200))...)
	r := wire.NewReader(bytes.NewReader(stream), 100)
	if h, _, err := r.Next(); err != nil || h.Type != wire.TypePing {
		t.Fatalf("first frame: %+v, %v", h, err)
	}
	for range 2 {
		if _, _, err := r.Next(); !errors.Is(err, wire.ErrTooLarge) {
			t.Fatalf("err = %v, want ErrTooLarge", err)
		}
	}
}

func TestReaderSetMaxBody(t *testing.T) {
	f := wire.AppendPublish(nil, 2, 0, "c", make([]byte, 200))
	r := wire.NewReader(bytes.NewReader(append(append([]byte(nil), f...), f...)), 100)
	r.SetMaxBody(300)
	for i := range 2 {
		if h, body, err := r.Next(); err != nil || len(body) != 202 || h.Len != 202 {
			t.Fatalf("frame %d: %+v, %d bytes, %v", i, h, len(body), err)
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("err = %v", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func TestReaderNoProgress(t *testing.T) {
	r := wire.NewReader(zeroReader{}, 100)
	if _, _, err := r.Next(); err != io.ErrNoProgress {
		t.Fatalf("err = %v, want io.ErrNoProgress", err)
	}
}

func TestReaderReset(t *testing.T) {
	r := wire.NewReader(bytes.NewReader([]byte{0, 0}), 100)
	if _, _, err := r.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("err = %v", err)
	}
	r.Reset(bytes.NewReader(wire.AppendPing(nil, 5)))
	if h, _, err := r.Next(); err != nil || h.Type != wire.TypePing || h.ID != 5 || r.Buffered() != 0 {
		t.Fatalf("after Reset: %+v, %v, buffered %d", h, err, r.Buffered())
	}
}

// loopReader serves the same stream forever.
type loopReader struct {
	data []byte
	off  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.data[l.off:])
	l.off = (l.off + n) % len(l.data)
	return n, nil
}

func TestReaderZeroAllocsSteadyState(t *testing.T) {
	stream, _ := allValid()
	r := wire.NewReader(&loopReader{data: stream}, testMaxBody)
	for range 100 { // warm up: the buffer reaches its working size
		if _, _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(1000, func() {
		if _, _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocs per frame, want 0", n)
	}
}
