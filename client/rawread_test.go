//go:build linux

package client

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-rtm/sluice/wire"
)

// The raw read path (rawread_linux.go) with real sockets on 127.0.0.1.

// frameRig is a frameReader on the client end of a loopback TCP
// connection; the test writes to peer.
type frameRig struct {
	t      *testing.T
	peer   net.Conn
	nc     net.Conn
	fr     *frameReader
	done   chan struct{}
	frames chan recvFrame
	parks  chan int64    // bytes read so far, each time the reader parks
	ended  chan error    // run's result
	block  chan struct{} // if set, handle waits for it to close (or done)
	over   chan struct{} // closed when result is set (endedC)
	result error
}

type recvFrame struct {
	h    wire.Header
	body []byte
}

// tcpPair is a connected pair of TCP sockets on 127.0.0.1: the client's
// end (a *net.TCPConn) and the accepted peer. The caller closes both.
func tcpPair(tb testing.TB) (nc *net.TCPConn, peer net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	if peer, err = ln.Accept(); err != nil {
		c.Close()
		tb.Fatal(err)
	}
	return c.(*net.TCPConn), peer
}

// newFrameRig connects over 127.0.0.1; wrap hides the *net.TCPConn (the
// plain path).
func newFrameRig(t *testing.T, wrap bool) *frameRig {
	t.Helper()
	nc, peer := tcpPair(t)
	r := &frameRig{t: t, peer: peer, nc: nc, done: make(chan struct{}),
		frames: make(chan recvFrame, 1<<14), parks: make(chan int64, 1<<16), ended: make(chan error, 1)}
	var c net.Conn = nc
	if wrap {
		c = struct{ net.Conn }{nc}
	}
	r.fr = newFrameReader(c, 1<<20)
	r.fr.onPark = func(n int64) {
		select {
		case r.parks <- n:
		default:
			panic("frameRig: park log full")
		}
	}
	t.Cleanup(func() {
		peer.Close()
		nc.Close()
	})
	return r
}

func (r *frameRig) start() {
	go func() {
		r.ended <- r.fr.run(func(h wire.Header, body []byte) error {
			if r.block != nil {
				select {
				case <-r.block:
				case <-r.done:
				}
			}
			r.frames <- recvFrame{h, bytes.Clone(body)}
			return nil
		})
	}()
}

// waitPark waits until the reader parks having read total bytes.
func (r *frameRig) waitPark(total int64) {
	r.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case n := <-r.parks:
			if n == total {
				return
			}
		case <-r.endedC():
			r.t.Fatalf("reader ended waiting for park at %d bytes: %v", total, r.result)
		case <-timeout:
			r.t.Fatalf("reader did not park after %d bytes", total)
		}
	}
}

// expect waits for the frames of want, in order (frames handled before
// the reader ended count: the end is kept for end).
func (r *frameRig) expect(want []recvFrame) {
	r.t.Helper()
	timeout := time.After(10 * time.Second)
	for i, w := range want {
		var f recvFrame
		select {
		case f = <-r.frames:
		case <-r.endedC():
			select {
			case f = <-r.frames:
			default:
				r.t.Fatalf("reader ended before frame %d of %d: %v", i, len(want), r.result)
			}
		case <-timeout:
			r.t.Fatalf("frame %d of %d not read in 10 s (lost wake-up?)", i, len(want))
		}
		if f.h != w.h || !bytes.Equal(f.body, w.body) {
			r.t.Fatalf("frame %d: got %v %d bytes, want %v %d bytes", i, f.h, len(f.body), w.h, len(w.body))
		}
	}
}

// endedC returns a channel ready once the reader has ended (r.result
// then holds run's result).
func (r *frameRig) endedC() <-chan struct{} {
	if r.over == nil {
		r.over = make(chan struct{})
		go func() {
			r.result = <-r.ended
			close(r.over)
		}()
	}
	return r.over
}

func (r *frameRig) end() error {
	r.t.Helper()
	select {
	case <-r.endedC():
		return r.result
	case <-time.After(10 * time.Second):
		r.t.Fatal("reader did not return")
		return nil
	}
}

func (r *frameRig) write(b []byte) {
	r.t.Helper()
	if _, err := r.peer.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

// testStream returns frames of several sizes and their encoding.
func testStream(sizes ...int) ([]byte, []recvFrame) {
	var stream []byte
	var want []recvFrame
	for i, n := range sizes {
		p := bytes.Repeat([]byte{byte('a' + i)}, n)
		start := len(stream)
		stream = wire.AppendPublish(stream, uint32(i+1), 0, "ch", p)
		h, body, _, _ := wire.Split(stream[start:], 1<<20)
		want = append(want, recvFrame{h, bytes.Clone(body)})
	}
	return stream, want
}

// TestRawRead_SplitAtEveryBoundary: the stream written in two pieces, cut
// at every byte, the second written only once the reader has read the
// first and parked, arrives whole: a frame completed after the reader
// parked is read without further prompting.
func TestRawRead_SplitAtEveryBoundary(t *testing.T) {
	stream, want := testStream(0, 5, 300)
	r := newFrameRig(t, false)
	r.start()
	var total int64
	for k := 1; k < len(stream); k++ {
		r.write(stream[:k])
		r.waitPark(total + int64(k))
		r.write(stream[k:])
		total += int64(len(stream))
		r.waitPark(total)
		r.expect(want)
	}
	r.peer.Close()
	if err := r.end(); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("after the peer closed: %v, want ErrDisconnected", err)
	}
	if raw := r.fr.src.raw; raw.reads == 0 || raw.bytes != total {
		t.Fatalf("raw path: %d reads, %d bytes; want > 0 reads and %d bytes", raw.reads, raw.bytes, total)
	}
}

// TestRawRead_OneReadPerArrival: frames that arrive one at a time, each
// after the reader parked, cost one read each: none returns EAGAIN,
// because the reader parks after a read that TCP_CM_INQ says drained the
// socket (with net.Conn.Read every frame costs a second read that returns
// EAGAIN).
func TestRawRead_OneReadPerArrival(t *testing.T) {
	const n = 200
	stream, want := testStream(100)
	r := newFrameRig(t, false)
	r.start()
	for i := range n {
		r.write(stream)
		r.waitPark(int64((i + 1) * len(stream)))
		r.expect(want)
	}
	r.peer.Close()
	_ = r.end()
	raw := r.fr.src.raw
	if !raw.inq {
		t.Fatal("TCP_INQ refused: a kernel before Linux 4.18 reads until EAGAIN")
	}
	// The EOF costs a read; a readiness the runtime reports for bytes
	// already read costs one that returns EAGAIN (rare here: nothing
	// arrives while the reader runs).
	if raw.wouldBlock > n/4 || raw.reads > n+1+n/4 {
		t.Fatalf("%d frames: %d reads, %d returned EAGAIN; want about one read per frame", n, raw.reads, raw.wouldBlock)
	}
}

// TestRawRead_CloseUnblocksParked: closing the socket wakes a parked
// reader, which returns an error that matches net.ErrClosed.
func TestRawRead_CloseUnblocksParked(t *testing.T) {
	r := newFrameRig(t, false)
	r.start()
	stream, want := testStream(10)
	r.write(stream)
	r.waitPark(int64(len(stream)))
	r.expect(want)
	r.fr.stopped.Store(true)
	r.nc.Close()
	if err := r.end(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatalf("closed while parked: %v, want nil (done) or net.ErrClosed", err)
	}
}

// TestRawRead_CloseWhileDispatching: Close from another goroutine while
// the reader is inside a frame's handler returns once the handler sees
// done (it waits for the reader's read lock), and the reader stops with
// nil, reading no more frames.
func TestRawRead_CloseWhileDispatching(t *testing.T) {
	r := newFrameRig(t, false)
	r.block = make(chan struct{})
	r.start()
	stream, _ := testStream(10, 10, 10)
	r.write(stream)
	closed := make(chan struct{})
	go func() {
		r.fr.stopped.Store(true) // as session.fail: stopped and done first, then the socket
		close(r.done)
		r.nc.Close()
		close(closed)
	}()
	if err := r.end(); err != nil {
		t.Fatalf("reader stopped by done: %v, want nil", err)
	}
	<-closed
	if got := len(r.frames); got > 1 {
		t.Fatalf("%d frames handled after done, want at most the one in progress", got)
	}
}

// TestRawRead_DeadlineUnblocks: a read deadline in the past wakes a parked
// reader with os.ErrDeadlineExceeded.
func TestRawRead_DeadlineUnblocks(t *testing.T) {
	r := newFrameRig(t, false)
	r.start()
	stream, want := testStream(10)
	r.write(stream)
	r.waitPark(int64(len(stream)))
	r.expect(want)
	if err := r.nc.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := r.end(); !errors.Is(err, os.ErrDeadlineExceeded) || !errors.Is(err, ErrDisconnected) {
		t.Fatalf("after the deadline: %v, want ErrDisconnected and os.ErrDeadlineExceeded", err)
	}
}

// TestRawRead_RandomPiecesNoLostWakeup: a writer sends 3,000 frames of
// random sizes in random pieces, yielding at random; raw and plain path
// both read every frame, in order, and neither stalls (each piece is
// bounded by a timeout, so a lost wake-up fails the test).
func TestRawRead_RandomPiecesNoLostWakeup(t *testing.T) {
	for _, plain := range []bool{false, true} {
		seed := uint64(time.Now().UnixNano())
		rng := rand.New(rand.NewPCG(seed, 16))
		sizes := make([]int, 3000)
		for i := range sizes {
			sizes[i] = rng.IntN(64)
			if rng.IntN(20) == 0 {
				sizes[i] = rng.IntN(40000)
			}
		}
		stream, want := testStream(sizes...)
		r := newFrameRig(t, plain)
		r.fr.onPark = nil
		r.start()
		go func() {
			for rest := stream; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(3000))
				if _, err := r.peer.Write(rest[:n]); err != nil {
					return
				}
				rest = rest[n:]
				if rng.IntN(3) == 0 {
					runtime.Gosched()
				}
			}
		}()
		r.expect(want)
		r.peer.Close()
		if err := r.end(); !errors.Is(err, ErrDisconnected) {
			t.Fatalf("plain=%v seed %d: after the peer closed: %v", plain, seed, err)
		}
		if raw := r.fr.src.raw; plain != (raw.reads == 0) {
			t.Fatalf("plain=%v: the raw path made %d reads", plain, raw.reads)
		}
	}
}

// TestRawRead_WithoutTCPINQ: on a kernel without TCP_INQ the raw path
// reads until EAGAIN (two reads per arrival) and loses nothing either.
func TestRawRead_WithoutTCPINQ(t *testing.T) {
	const n = 50
	stream, want := testStream(0, 100)
	r := newFrameRig(t, false)
	r.fr.noInq = true
	r.start()
	for i := range n {
		r.write(stream)
		r.waitPark(int64((i + 1) * len(stream)))
		r.expect(want)
	}
	r.write(stream)
	r.peer.Close()
	r.expect(want)
	if err := r.end(); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("after the last frame and FIN: %v, want ErrDisconnected", err)
	}
	if raw := r.fr.src.raw; raw.inq || raw.wouldBlock < n {
		t.Fatalf("inq %v, %d of %d reads returned EAGAIN; want reads until EAGAIN (>= %d)", raw.inq, raw.wouldBlock, raw.reads, n)
	}
}

// BenchmarkRawRead_OneFrameAtATime: a 128-byte DATA-sized frame written
// only after the reader handled the previous one, as each of 10,000
// subscriber connections receives its channel's messages: raw path
// against the plain path (net.Conn.Read) in the same run. reads/frame is
// reads per frame on the raw path (the plain path's is 2: one
// returns the frame, one EAGAIN before it parks); cpu-ns/frame is the
// process's CPU time (user+system, both ends) per frame, steadier than
// ns/op on a loaded machine, where a ping-pong's wall time is mostly
// waiting for a core.
func BenchmarkRawRead_OneFrameAtATime(b *testing.B) {
	for _, path := range []string{"raw", "plain"} {
		b.Run("path="+path, func(b *testing.B) {
			nc, peer := tcpPair(b)
			defer nc.Close()
			defer peer.Close()
			var c net.Conn = nc
			if path == "plain" {
				c = struct{ net.Conn }{nc}
			}
			fr := newFrameReader(c, 1<<20)
			got := make(chan struct{}, 1)
			ended := make(chan error, 1)
			go func() {
				ended <- fr.run(func(wire.Header, []byte) error {
					got <- struct{}{}
					return nil
				})
			}()
			frame := wire.AppendPublish(nil, 1, 0, "ch", make([]byte, 128))
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.ResetTimer()
			for range b.N {
				if _, err := peer.Write(frame); err != nil {
					b.Fatal(err)
				}
				<-got
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/frame")
			peer.Close()
			<-ended
			if path == "raw" {
				b.ReportMetric(float64(fr.src.raw.reads)/float64(b.N), "reads/frame")
			}
		})
	}
}

// processCPU returns the process's user+system CPU time in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestRawRead_DataThenFINTogether: a peer that writes its last frame and
// closes at once puts both in the socket before the reader runs; the read
// that returns the frame also consumes the FIN (a short read), and no
// later readiness will come. The reader must still see the end.
func TestRawRead_DataThenFINTogether(t *testing.T) {
	for i := range 50 {
		r := newFrameRig(t, false)
		r.start()
		stream, want := testStream(10)
		r.write(stream)
		r.waitPark(int64(len(stream)))
		r.expect(want)
		r.write(stream)
		r.peer.Close()
		r.expect(want)
		if err := r.end(); !errors.Is(err, ErrDisconnected) {
			t.Fatalf("round %d: after the last frame and FIN: %v, want ErrDisconnected", i, err)
		}
	}
}
