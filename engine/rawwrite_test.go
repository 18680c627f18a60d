//go:build linux

package engine

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-rtm/sluice/wire"
)

func TestAdvanceVecs(t *testing.T) {
	vec := func(lens ...int) [][]byte {
		bs := make([][]byte, len(lens))
		for i, n := range lens {
			bs[i] = make([]byte, n)
			for k := range bs[i] {
				bs[i][k] = byte(10*i + k)
			}
		}
		return bs
	}
	for _, tc := range []struct {
		name string
		lens []int
		n    int
		want [][]byte
	}{
		{"nothing written", []int{3, 2}, 0, [][]byte{{0, 1, 2}, {10, 11}}},
		{"inside the first", []int{3, 2}, 1, [][]byte{{1, 2}, {10, 11}}},
		{"exactly the first", []int{3, 2}, 3, [][]byte{{10, 11}}},
		{"into the second", []int{3, 2}, 4, [][]byte{{11}}},
		{"everything", []int{3, 2}, 5, [][]byte{}},
		{"empty vectors before the cut are dropped", []int{2, 0, 0, 2}, 2, [][]byte{{30, 31}}},
		{"empty vectors only", []int{0, 0}, 0, [][]byte{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := advanceVecs(vec(tc.lens...), tc.n)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d vectors %v, want %v", len(got), got, tc.want)
			}
			for i := range got {
				if !bytes.Equal(got[i], tc.want[i]) {
					t.Fatalf("vector %d: got %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// tcpPair returns the two ends of a loopback TCP connection, with small
// socket buffers so that the writer's socket fills soon.
func tcpPair(t testing.TB) (w, r *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-acc
	if a == nil {
		t.Fatal("accept failed")
	}
	w, r = d.(*net.TCPConn), a.(*net.TCPConn)
	t.Cleanup(func() { w.Close(); r.Close() })
	if err := w.SetWriteBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	if err := r.SetReadBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	return w, r
}

// rawWrite runs rw.write on the descriptor of c (non-blocking, as gnet's).
func rawWrite(t testing.TB, rw *rawWriter, c *net.TCPConn, bs [][]byte) (rest [][]byte, err error) {
	t.Helper()
	sc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if cerr := sc.Control(func(fd uintptr) { rest, err = rw.write(int(fd), bs) }); cerr != nil {
		t.Fatal(cerr)
	}
	return rest, err
}

// patternVecs returns vectors of varied lengths (empty ones, more of them
// than IOV_MAX, two longer than rawMax) and their concatenation.
func patternVecs(n int) (bs [][]byte, all []byte) {
	for i := range n {
		k := (i * 7919) % 2000
		switch {
		case i%5 == 3:
			k = 0
		case i == n/3 || i == n/2:
			k = rawMax + 1234
		}
		b := make([]byte, k)
		for j := range b {
			b[j] = byte(i*31 + j*7 + j>>8)
		}
		all = append(all, b...)
		bs = append(bs, b)
	}
	return bs, all
}

func concat(bs [][]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// A raw write to a socket that fills returns exactly what it did not
// write; written and returned rest together are the input, byte for byte,
// however the kernel cut it, and the writer keeps no reference to the
// output.
func TestRawWriter_ShortWriteReturnsExactlyTheRest(t *testing.T) {
	w, r := tcpPair(t)
	bs, want := patternVecs(2100) // ~2.5 MB, far more than both buffers
	var rw rawWriter
	got := make([]byte, 0, len(want))
	buf := make([]byte, 64<<10)
	rest := bs
	shorts := 0
	for len(rest) > 0 {
		var err error
		rest, err = rawWrite(t, &rw, w, rest)
		if err != nil {
			t.Fatalf("write: %v", err)
		}
		for _, v := range rw.iov[:cap(rw.iov)] {
			if v.Base != nil {
				t.Fatal("the iovec scratch still references output after the call")
			}
		}
		if len(rest) == 0 {
			break
		}
		shorts++
		written := len(want) - len(concat(rest))
		if !bytes.Equal(concat(rest), want[written:]) {
			t.Fatalf("after %d bytes written the rest is not the unwritten suffix", written)
		}
		if len(got) > written {
			t.Fatalf("read %d bytes, more than the %d written", len(got), written)
		}
		// Read some of it (the socket is full, so something is there).
		_ = r.SetReadDeadline(time.Now().Add(waitFor))
		n, err := r.Read(buf)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		got = append(got, buf[:n]...)
	}
	_ = r.SetReadDeadline(time.Now().Add(waitFor))
	rem := make([]byte, len(want)-len(got))
	if _, err := io.ReadFull(r, rem); err != nil {
		t.Fatalf("read the last %d bytes: %v", len(rem), err)
	}
	got = append(got, rem...)
	if !bytes.Equal(got, want) {
		t.Fatalf("the reader got %d bytes that differ from the %d written", len(got), len(want))
	}
	if shorts == 0 {
		t.Fatal("the socket never filled: the short-write path was not exercised")
	}
	t.Logf("%d bytes in %d vectors, %d short writes", len(want), len(bs), shorts)
}

// A write that fails for another reason than a full socket returns the
// error and everything as unwritten; the process survives the SIGPIPE.
func TestRawWriter_ErrorReturnsEverything(t *testing.T) {
	w, _ := tcpPair(t)
	if err := w.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	bs, want := patternVecs(10)
	var rw rawWriter
	rest, err := rawWrite(t, &rw, w, bs)
	if !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write after shutdown: err %v, want EPIPE", err)
	}
	if !bytes.Equal(concat(rest), want) {
		t.Fatalf("the rest after an error is %d bytes, want all %d", len(concat(rest)), len(want))
	}
}

// helloConn returns the server side of the one client connection of s
// that completed its handshake, looked at on its loop.
func helloConn(t *testing.T, s *Server) *conn {
	t.Helper()
	var found *conn
	onLoops(t, s, func(l *loop) {
		for c := range l.conns {
			if c.hello && !c.closed {
				found = c
			}
		}
	})
	if found == nil {
		t.Fatal("no client connection on the server")
	}
	return found
}

// writeOnLoop runs c.writev(bs) on c's loop and returns gnet's buffered
// bytes after it, and whether c was closed.
func writeOnLoop(t *testing.T, c *conn, bs [][]byte) (buffered int, closed bool) {
	t.Helper()
	done := make(chan struct{})
	c.l.execute(func() {
		buffered = c.writev(bs)
		closed = c.closed
		close(done)
	})
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("the loop did not run the write")
	}
	return buffered, closed
}

// Output written while the peer does not read fills the socket; the rest
// waits in gnet's buffer, and output written later queues behind it: when
// the peer reads, it gets every byte in order. The source vectors are
// overwritten after each write: nothing may reference them afterwards.
func TestConnWritev_PeerThatStopsReadingGetsEveryByteInOrder(t *testing.T) {
	s := startTest(t, nil)
	cl, err := dialErr(t, s.Addr(), 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.handshakeErr(); err != nil {
		t.Fatal(err)
	}
	c := helloConn(t, s)
	var want []byte
	buffered := 0
	for round := range 8 {
		bs, all := patternVecs(700 + round) // 1.2 MB each, 9.6 MB in all (a send buffer grows to 4 MB), > maxIov vectors in the last
		want = append(want, all...)
		buffered, _ = writeOnLoop(t, c, bs)
		for _, b := range bs {
			clear(b)
		}
	}
	if buffered == 0 {
		t.Fatal("gnet buffers nothing although the peer reads nothing: the short-write path was not exercised")
	}
	var ws uint64
	onLoops(t, s, func(l *loop) { ws += l.stats.writesBuffered })
	if ws == 0 {
		t.Fatal("writesBuffered not counted")
	}
	got := make([]byte, len(want))
	_ = cl.nc.SetReadDeadline(time.Now().Add(waitFor))
	if _, err := io.ReadFull(cl.nc, got); err != nil {
		t.Fatalf("read %d bytes: %v", len(got), err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		t.Fatalf("the peer got different bytes from offset %d of %d", i, len(want))
	}
}

// A write error other than a full socket closes the connection as gnet
// closes it on its own write errors; the server serves on.
func TestConnWritev_WriteErrorClosesTheConnection(t *testing.T) {
	s := startTest(t, nil)
	cl, _ := helloRaw(t, s.Addr())
	c := helloConn(t, s)
	done := make(chan error, 1)
	c.l.execute(func() { done <- unix.Shutdown(c.gc.Fd(), unix.SHUT_WR) })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	bs, _ := patternVecs(5)
	if _, closed := writeOnLoop(t, c, bs); !closed {
		t.Fatal("the connection is open after a write that failed with EPIPE")
	}
	cl.expectClosed()
	eventually(t, waitFor, "the closed connection is still counted", func() bool {
		return s.Metrics(t.Context()).Connections == 0
	})
	other, _ := helloRaw(t, s.Addr())
	other.subscribe(1, "after", wire.StartLive, 0)
}

// A subscriber that stops reading until its socket is full, then reads,
// gets every message in order, byte-exact, with no gap: its live output
// waited in the server's outbound buffer (the outbound limit is above what
// is published, so it never lags).
func TestSubscriberThatStopsReadingGetsEveryMessageInOrder(t *testing.T) {
	s := startTest(t, func(o *Options) { o.OutboundLimit = 64 << 20 })
	sub, err := dialErr(t, s.Addr(), 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.handshakeErr(); err != nil {
		t.Fatal(err)
	}
	sub.subscribe(1, "full", wire.StartLive, 0)
	pub, _ := helloRaw(t, s.Addr())
	const n, size = 8000, 1500 // 12 MB: more than a socket send buffer grows to (tcp_wmem 4 MB)
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = checkedPayload(1, uint32(i), size)
	}
	pos, err := pub.publishBatch("full", payloads)
	if err != nil {
		t.Fatal(err)
	}
	// The deliveries run on the subscriber's loop, maybe after the acks.
	eventually(t, waitFor, "no write was buffered: the subscriber's socket never filled", func() bool {
		return s.Metrics(t.Context()).WritesBuffered > 0
	})
	evs, err := sub.eventsUntil(1, pos[n-1])
	if err != nil {
		t.Fatal(err)
	}
	msgs, gaps, err := checkStream(evs, 1, pos[0], pos[n-1])
	if err != nil {
		t.Fatal(err)
	}
	if len(gaps) > 0 {
		t.Fatalf("gaps %v", gaps)
	}
	for i, p := range pos {
		if got := msgs[p]; got != string(payloads[i]) {
			pb, seq, err := verifyPayload([]byte(got))
			t.Fatalf("position %d: payload differs (%d bytes, pub %d seq %d, %v), want seq %d", p, len(got), pb, seq, err, i)
		}
	}
}

// BenchmarkSocketWrite measures one delivery-sized write (a DATA header,
// prefix and one 128-byte record in three vectors) to a loopback TCP
// socket that a goroutine drains: as a raw writev (rawWriter) and through
// the ordinary syscall wrapper gnet uses (unix.Writev). A full socket is
// waited for with poll(2). Compare the two in one run; with one core per
// loop busy the wrapper's cost also shows as sysmon's P hand-offs, which
// this single-goroutine benchmark does not provoke.
func BenchmarkSocketWrite(b *testing.B) {
	for _, mode := range []string{"raw", "syscall"} {
		b.Run(mode, func(b *testing.B) {
			w, r := tcpPair(b)
			_ = w.SetWriteBuffer(1 << 20)
			_ = r.SetReadBuffer(1 << 20)
			drained := make(chan struct{})
			go func() {
				defer close(drained)
				buf := make([]byte, 256<<10)
				for {
					if _, err := r.Read(buf); err != nil {
						return
					}
				}
			}()
			sc, err := w.SyscallConn()
			if err != nil {
				b.Fatal(err)
			}
			hdr := make([]byte, wire.HeaderLen)
			prefix := make([]byte, wire.DataPrefixLen)
			rec := make([]byte, 4+128)
			var rw rawWriter
			iov := make([][]byte, 3)
			b.ReportAllocs()
			b.SetBytes(int64(len(hdr) + len(prefix) + len(rec)))
			b.ResetTimer()
			err = sc.Control(func(fd uintptr) {
				for range b.N {
					iov[0], iov[1], iov[2] = hdr, prefix, rec
					rest := iov
					for len(rest) > 0 {
						var err error
						if mode == "raw" {
							rest, err = rw.write(int(fd), rest)
						} else {
							var n int
							n, err = unix.Writev(int(fd), rest)
							if err == unix.EAGAIN {
								err, n = nil, 0
							}
							rest = advanceVecs(rest, n)
						}
						if err != nil {
							b.Error(err)
							return
						}
						if len(rest) > 0 {
							pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
							_, _ = unix.Poll(pfd, 1000)
						}
					}
				}
			})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			w.Close()
			<-drained
		})
	}
}
