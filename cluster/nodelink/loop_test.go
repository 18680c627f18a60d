package nodelink

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/ringbuf"
	"github.com/sluice-rtm/sluice/wire"
)

// A minimal event loop for the package's tests, standing in for the
// engine's: one goroutine per connection runs every NodeConn callback and
// task in order, a reader goroutine hands it the bytes read, and what was
// queued is written through NodeConn.Write after each callback or task.

// testLoop carries one node connection over a real socket.
type testLoop struct {
	nc net.Conn
	nd NodeConn // set by the first task

	mu     sync.Mutex
	tasks  []func()
	wake   chan struct{}
	closed chan struct{} // closed once the loop ended

	// Owned by the loop's goroutine.
	scratch []byte
	iov     [][]byte
	pending int
	held    []*ringbuf.Buffer
	closing bool
}

func newTestLoop(nc net.Conn) *testLoop {
	return &testLoop{nc: nc, wake: make(chan struct{}, 1), closed: make(chan struct{})}
}

// run carries the connection until it closes; start is its first task
// (it sets nd). wg counts the loop's goroutines.
func (l *testLoop) run(wg *sync.WaitGroup, start func()) {
	l.Execute(start)
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		var in []byte
		for {
			n, err := l.nc.Read(buf)
			if n > 0 {
				data := append([]byte(nil), buf[:n]...)
				l.Execute(func() {
					in = append(in, data...)
					k := l.nd.Input(in)
					in = in[k:]
				})
			}
			if err != nil {
				l.Execute(l.Close)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		defer close(l.closed)
		for {
			<-l.wake
			l.mu.Lock()
			tasks := l.tasks
			l.tasks = nil
			l.mu.Unlock()
			for _, fn := range tasks {
				fn()
				l.Flush()
				if l.closing {
					_ = l.nc.Close()
					if l.nd != nil {
						l.nd.Closed()
					}
					return
				}
			}
		}
	}()
}

func (l *testLoop) OwnStart() []byte { return l.scratch[:0] }
func (l *testLoop) OwnEnd(b []byte) {
	if len(b) > 0 {
		l.iov = append(l.iov, append([]byte(nil), b...))
		l.pending += len(b)
	}
	l.scratch = b[:0]
}
func (l *testLoop) Share(b []byte) {
	l.iov = append(l.iov, b)
	l.pending += len(b)
}
func (l *testLoop) Hold(b *ringbuf.Buffer) { l.held = append(l.held, b) }
func (l *testLoop) Flush() {
	if len(l.iov) > 0 && l.nd != nil {
		if err := l.nd.Write(l.iov, sockWriter{l.nc}); err != nil {
			l.closing = true
		}
	}
	l.iov, l.pending = l.iov[:0], 0
	for _, b := range l.held {
		b.Release()
	}
	l.held = l.held[:0]
}
func (l *testLoop) Outbound() int      { return l.pending }
func (l *testLoop) Close()             { l.closing = true }
func (l *testLoop) Now() int64         { return time.Now().UnixNano() }
func (l *testLoop) RemoteAddr() string { return l.nc.RemoteAddr().String() }
func (l *testLoop) CountOut(int)       {}
func (l *testLoop) Execute(fn func()) {
	l.mu.Lock()
	l.tasks = append(l.tasks, fn)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

type sockWriter struct{ c net.Conn }

func (w sockWriter) Write(b []byte) (int, error) { return w.c.Write(b) }
func (w sockWriter) Writev(bs [][]byte) (int, error) {
	n := 0
	for _, b := range bs {
		k, err := w.c.Write(b)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// testTransport enrolls dialed links in test loops.
type testTransport struct {
	wg    *sync.WaitGroup
	mu    sync.Mutex
	loops []*testLoop
}

func (t *testTransport) Enroll(c net.Conn, e Enrolled, _ time.Time) error {
	l := newTestLoop(c)
	t.mu.Lock()
	t.loops = append(t.loops, l)
	t.mu.Unlock()
	l.run(t.wg, func() {
		l.nd = e
		if !e.Attach(l) {
			l.Close()
		}
	})
	return nil
}

// testDir is a Directory of fixed addresses that records Reached.
type testDir struct {
	mu      sync.Mutex
	addrs   map[string]string
	reached []string
}

func (d *testDir) Dialable(node string, _ bool) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.addrs[node]
	return a, ok
}
func (d *testDir) Reached(node string, _ bool) {
	d.mu.Lock()
	d.reached = append(d.reached, node)
	d.mu.Unlock()
}
func (d *testDir) Unreached() []string { return nil }

// testHandler answers requests with serve and reports the rest on
// channels.
type testHandler struct {
	serve      func(peer string, op wire.NodeOp, body []byte) (uint8, []byte, string)
	feeds      chan wire.NodeFeed
	replicated chan wire.NodeReplicated
	down       chan string
}

func newTestHandler() *testHandler {
	return &testHandler{feeds: make(chan wire.NodeFeed, 16), replicated: make(chan wire.NodeReplicated, 16),
		down: make(chan string, 16),
		serve: func(string, wire.NodeOp, []byte) (uint8, []byte, string) {
			return wire.NodeOK, nil, ""
		}}
}

func (h *testHandler) Serve(peer string, op wire.NodeOp, body []byte) (uint8, []byte, string) {
	return h.serve(peer, op, body)
}
func (h *testHandler) Feed(_ string, f wire.NodeFeed, _, _ []byte) { h.feeds <- f }
func (h *testHandler) Replicated(_ *Link, r wire.NodeReplicated)   { h.replicated <- r }
func (h *testHandler) Down(node string)                            { h.down <- node }
func (h *testHandler) Heartbeat(int64, bool)                       {}

// testNode is one node's Links, accepting on a loopback listener; its
// inbound connections' data plane is inbound (nil: a recorder).
type testNode struct {
	name    string
	ls      *Links
	h       *testHandler
	dir     *testDir
	ln      net.Listener
	inbound atomic.Pointer[func(Inbound) InboundHandler]
	stop    chan struct{}
	// stopOnce closes stop (a test may stop the node early).
	stopOnce sync.Once
}

const testSecret = "s3cret"

// newTestNodes starts nodes with the given names, each able to dial the
// others; everything they started ends with the test.
func newTestNodes(t *testing.T, opts func(*Config), names ...string) map[string]*testNode {
	t.Helper()
	var wg sync.WaitGroup
	nodes := map[string]*testNode{}
	addrs := map[string]string{}
	for _, name := range names {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[name] = ln.Addr().String()
		n := &testNode{name: name, h: newTestHandler(), ln: ln, stop: make(chan struct{})}
		n.dir = &testDir{addrs: addrs}
		cfg := Config{Self: name, Secret: testSecret, Conns: ConnOptions{MaxBody: 1 << 20}, Transport: &testTransport{wg: &wg},
			Directory: n.dir, Handler: n.h, Stop: n.stop, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Clock: time.Now, RPCTimeout: time.Second,
			Go: func(fn func()) bool { wg.Add(1); go func() { defer wg.Done(); fn() }(); return true }}
		if opts != nil {
			opts(&cfg)
		}
		n.ls = New(cfg)
		n.ls.SetClientAddr(addrs[name])
		nodes[name] = n
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				l := newTestLoop(c)
				l.run(&wg, func() {
					welcome := func(Inbound) InboundHandler { return &recorder{} }
					if w := n.inbound.Load(); w != nil {
						welcome = *w
					}
					l.nd = n.ls.Accept(l, welcome)
				})
			}
		}()
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.stopOnce.Do(func() { close(n.stop) })
			_ = n.ln.Close()
			n.ls.CloseAll()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the test loops did not end")
		}
	})
	return nodes
}

// recorder is an InboundHandler that passes what it gets to a channel.
type recorder struct {
	in  Inbound
	got chan any
}

func (r *recorder) send(v any) {
	if r.got != nil {
		r.got <- v
	}
}
func (r *recorder) Append(id uint32, a wire.NodeAppend, run []byte) {
	r.send(appended{id, a, append([]byte(nil), run...)})
}
func (r *recorder) Read(id uint64, from uint32) { r.send(readReq{id, from}) }
func (r *recorder) Unread(id uint64)            { r.send(unreadReq{id}) }
func (r *recorder) Replicate(rp wire.NodeReplicate, _, _ []byte) {
	r.send(rp)
}
func (r *recorder) Closed() { r.send(closedConn{}) }

type appended struct {
	id  uint32
	a   wire.NodeAppend
	run []byte
}
type readReq struct {
	id   uint64
	from uint32
}
type unreadReq struct{ id uint64 }
type closedConn struct{}

// recv waits for the next value on ch, at most 10 s.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
		var zero T
		return zero
	}
}
