package nodelink

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// TestCall_AnsweredByThePeer: a request goes out on a dialed, sealed
// link, the peer's Handler serves it (knowing who asked), and the answer
// comes back to the caller; a refusal is a *StatusError with the peer's
// status and text; the Directory learns the link was made.
func TestCall_AnsweredByThePeer(t *testing.T) {
	nodes := newTestNodes(t, nil, "a", "b")
	a, b := nodes["a"], nodes["b"]
	b.h.serve = func(peer string, op wire.NodeOp, body []byte) (uint8, []byte, string) {
		if op == wire.OpSeal {
			return wire.NodeUnknown, nil, "no such streamlet"
		}
		return wire.NodeOK, append([]byte(peer+":"), body...), ""
	}
	got, err := a.ls.Call("b", wire.OpStatus, []byte("hi"))
	if err != nil || string(got) != "a:hi" {
		t.Fatalf("call: %q %v, want a:hi", got, err)
	}
	_, err = a.ls.Call("b", wire.OpSeal, nil)
	se, ok := errors.AsType[*StatusError](err)
	if !ok || se.Status != wire.NodeUnknown || se.Text != "no such streamlet" {
		t.Fatalf("refusal: %v, want status %d with the peer's text", err, wire.NodeUnknown)
	}
	a.dir.mu.Lock()
	reached := slices.Clone(a.dir.reached)
	a.dir.mu.Unlock()
	if !slices.Equal(reached, []string{"b"}) {
		t.Fatalf("reached %v, want [b] (one dial)", reached)
	}
	if a.ls.Existing("b") == nil || a.ls.Existing("c") != nil {
		t.Fatal("Existing: the link to b is not open, or one to c is")
	}
}

// TestCall_TimeoutFailsOnlyThatRequest: a request the peer does not
// answer in time fails alone; the link stays and carries the next one.
func TestCall_TimeoutFailsOnlyThatRequest(t *testing.T) {
	nodes := newTestNodes(t, nil, "a", "b")
	a, b := nodes["a"], nodes["b"]
	release := make(chan struct{})
	b.h.serve = func(_ string, op wire.NodeOp, _ []byte) (uint8, []byte, string) {
		if op == wire.OpSeal {
			<-release
		}
		return wire.NodeOK, []byte("ok"), ""
	}
	if _, err := a.ls.CallFor("b", wire.OpSeal, nil, 50*time.Millisecond); !errors.Is(err, errCallTimeout) {
		t.Fatalf("unanswered request: %v, want a timeout", err)
	}
	l := a.ls.Existing("b")
	close(release) // the late answer finds no caller
	if got, err := a.ls.Call("b", wire.OpStatus, nil); err != nil || string(got) != "ok" {
		t.Fatalf("next call: %q %v", got, err)
	}
	if a.ls.Existing("b") != l || a.ls.Failures() != 0 {
		t.Fatal("the link was replaced or failed after one request timed out")
	}
}

// TestDial_ConcurrentDialsShareOneLink: goroutines that need the same
// node at once share one dial and one link.
func TestDial_ConcurrentDialsShareOneLink(t *testing.T) {
	nodes := newTestNodes(t, nil, "a", "b")
	a := nodes["a"]
	links := make([]*Link, 8)
	var wg sync.WaitGroup
	for i := range links {
		wg.Add(1)
		go func() { defer wg.Done(); links[i] = a.ls.Dial("b") }()
	}
	wg.Wait()
	for i, l := range links {
		if l == nil || l != links[0] {
			t.Fatalf("dial %d got link %p, dial 0 %p", i, l, links[0])
		}
	}
	if a.ls.Dial("z") != nil {
		t.Fatal("a node the directory does not know was dialed")
	}
}

// TestDial_WrongSecretRefused: a peer with another cluster secret
// refuses the handshake; the dial fails and the Handler hears the node is
// down.
func TestDial_WrongSecretRefused(t *testing.T) {
	nodes := newTestNodes(t, func(c *Config) {
		if c.Self == "c" {
			c.Secret = "another"
		}
	}, "a", "c")
	a := nodes["a"]
	if l := a.ls.Dial("c"); l != nil {
		t.Fatal("a link was made to a node with another secret")
	}
	if got := recv(t, a.h.down, "down"); got != "c" {
		t.Fatalf("down %q, want c", got)
	}
}

// TestServe_PoolFullIsOverload: a request the pool cannot take is
// answered OVERLOAD at once.
func TestServe_PoolFullIsOverload(t *testing.T) {
	nodes := newTestNodes(t, func(c *Config) {
		if c.Self == "b" {
			c.Go = func(func()) bool { return false }
		}
	}, "a", "b")
	_, err := nodes["a"].ls.Call("b", wire.OpStatus, nil)
	if se, ok := errors.AsType[*StatusError](err); !ok || se.Status != wire.NodeOverload {
		t.Fatalf("call to a full pool: %v, want OVERLOAD", err)
	}
}

// answering is an InboundHandler that records what it gets and answers
// a NODE_READ with a sealed NODE_FEED notice and a NODE_REPLICATE with a
// NODE_REPLICATED.
type answering struct {
	recorder
}

func (r *answering) Read(id uint64, from uint32) {
	r.recorder.Read(id, from)
	c := r.in.Conn()
	b := c.OwnStart()
	b = wire.AppendNodeFeedHeader(b, wire.NodeFeed{Streamlet: id, Start: from, Flags: wire.FeedSealed}, nil, 0)
	c.OwnEnd(b)
}

func (r *answering) Replicate(rp wire.NodeReplicate, stamps, run []byte) {
	r.recorder.Replicate(rp, stamps, run)
	c := r.in.Conn()
	b := c.OwnStart()
	b = wire.AppendNodeReplicated(b, wire.NodeReplicated{Streamlet: rp.Streamlet, Status: wire.NodeOK, Held: rp.Start + rp.Count})
	c.OwnEnd(b)
}

// TestInbound_DataPlaneFrames: the data plane's frames reach the
// accepting node's InboundHandler decoded, a compressed NODE_APPEND
// inflated, from the authenticated peer; what it writes back (NODE_FEED,
// NODE_REPLICATED) reaches the dialing node's Handler; a closed
// connection is reported.
func TestInbound_DataPlaneFrames(t *testing.T) {
	nodes := newTestNodes(t, nil, "a", "b")
	a, b := nodes["a"], nodes["b"]
	got := make(chan any, 16)
	peers := make(chan string, 1)
	welcome := func(in Inbound) InboundHandler {
		peers <- in.Peer()
		return &answering{recorder{in: in, got: got}}
	}
	b.inbound.Store(&welcome)
	l := a.ls.Dial("b")
	if l == nil {
		t.Fatal("no link")
	}
	if p := recv(t, peers, "welcome"); p != "a" {
		t.Fatalf("peer %q, want a", p)
	}
	if err := l.Send(wire.AppendNodeRead(nil, 7, 3)); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, got, "read"); r != (readReq{7, 3}) {
		t.Fatalf("got %+v, want read 7 from 3", r)
	}
	if f := recv(t, a.h.feeds, "feed"); f.Streamlet != 7 || f.Start != 3 || f.Flags != wire.FeedSealed {
		t.Fatalf("feed %+v", f)
	}
	_ = l.Send(wire.AppendNodeUnread(nil, 7))
	if r := recv(t, got, "unread"); r != (unreadReq{7}) {
		t.Fatalf("got %+v, want unread 7", r)
	}

	// NODE_APPEND, plain and compressed.
	run := wire.AppendRecord(nil, bytes.Repeat([]byte("x"), 2000))
	na := wire.NodeAppend{Streamlet: 9, Epoch: 2, Count: 1}
	_ = l.Queue(func(dst []byte, id uint32) []byte {
		return append(wire.AppendNodeAppendHeader(dst, id, na, len(run)), run...)
	}, nil)
	_ = l.Queue(func(dst []byte, id uint32) []byte {
		start := len(dst)
		dst = wire.AppendNodeAppendS2Header(dst, id, na, 0)
		dst, ok, _ := wire.AppendCompressedRun(dst, [][]byte{run}, len(run), wire.DefaultS2Threshold, nil)
		if !ok {
			t.Error("the run did not compress")
		}
		binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-wire.HeaderLen))
		return dst
	}, nil)
	for i := range 2 {
		ap, _ := recv(t, got, "append").(appended)
		if ap.a != na || !bytes.Equal(ap.run, run) || ap.id == 0 {
			t.Fatalf("append %d: %+v (%d bytes), want %+v with the run", i, ap.a, len(ap.run), na)
		}
	}

	// NODE_REPLICATE, answered NODE_REPLICATED.
	rp := wire.NodeReplicate{Streamlet: 11, Epoch: 2, Start: 4, Commit: 4, Count: 1}
	frame := wire.AppendNodeReplicateHeader(nil, rp, []int64{42}, len(run))
	_ = l.Send(append(frame, run...))
	if r, _ := recv(t, got, "replicate").(wire.NodeReplicate); r != rp {
		t.Fatalf("replicate %+v, want %+v", r, rp)
	}
	if r := recv(t, a.h.replicated, "replicated"); r.Streamlet != 11 || r.Held != 5 {
		t.Fatalf("replicated %+v", r)
	}

	a.ls.CloseAll()
	if _, ok := recv(t, got, "closed").(closedConn); !ok {
		t.Fatal("the data plane did not hear the connection close")
	}
}

// TestInbound_MalformedFrameEndsOnlyThatConnection: a frame whose body
// breaks its layout is answered with a protocol ERROR and ends that one
// connection: the dialing side's link fails (the Handler hears the node
// is down), and the next dial makes a working link.
func TestInbound_MalformedFrameEndsOnlyThatConnection(t *testing.T) {
	nodes := newTestNodes(t, nil, "a", "b")
	a := nodes["a"]
	l := a.ls.Dial("b")
	bad := wire.AppendHeader(nil, wire.TypeNodeRead, 0, 0, 5)
	bad = append(bad, 1, 2, 3, 4, 5) // NODE_READ is 12 bytes
	if err := l.Send(bad); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, a.h.down, "down"); got != "b" {
		t.Fatalf("down %q, want b", got)
	}
	if !l.closed() || a.ls.Failures() != 1 {
		t.Fatalf("link closed %v, failures %d", l.closed(), a.ls.Failures())
	}
	if _, err := a.ls.Call("b", wire.OpStatus, nil); err != nil {
		t.Fatalf("call on a new link: %v", err)
	}
	if a.ls.Existing("b") == l {
		t.Fatal("the failed link is still used")
	}
}

// TestHeartbeat_SilentLinkClosed: the heartbeat closes a link on which
// nothing arrived for two RPC timeouts (the calls in flight fail, the
// Handler hears the node is down), but not when the heartbeat itself ran
// late (the process was paused: silence says nothing then).
func TestHeartbeat_SilentLinkClosed(t *testing.T) {
	nodes := newTestNodes(t, nil, "a", "b")
	a := nodes["a"]
	l := a.ls.Dial("b")
	now := time.Now()
	l.lastRecv.Store(now.Add(-3 * time.Second).UnixNano())
	a.ls.lastBeat = now.Add(-5 * time.Second).UnixNano() // paused for 5 s
	a.ls.heartbeat(now)
	if l.closed() || l.lastRecv.Load() != now.UnixNano() {
		t.Fatalf("after a pause: closed %v, last received %d (want the heartbeat's time)", l.closed(), l.lastRecv.Load())
	}
	later := now.Add(a.ls.silenceLimit() + time.Millisecond)
	l.lastRecv.Store(now.UnixNano())
	a.ls.lastBeat = later.Add(-a.ls.heartbeatEvery()).UnixNano()
	a.ls.heartbeat(later)
	if !l.closed() {
		t.Fatal("a link silent for longer than the limit is open")
	}
	if got := recv(t, a.h.down, "down"); got != "b" {
		t.Fatalf("down %q, want b", got)
	}
	if _, err := l.Call(wire.OpStatus, nil); !errors.Is(err, ErrLinkDown) {
		t.Fatalf("call on the dead link: %v, want ErrLinkDown", err)
	}
}

// TestCloseAll_AtShutdown: closing the links while the node stops fails
// the calls in flight, and is no failure: the Handler hears nothing.
func TestCloseAll_AtShutdown(t *testing.T) {
	nodes := newTestNodes(t, nil, "a", "b")
	a, b := nodes["a"], nodes["b"]
	entered := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	b.h.serve = func(string, wire.NodeOp, []byte) (uint8, []byte, string) {
		close(entered)
		<-release
		return wire.NodeOK, nil, ""
	}
	errs := make(chan error, 1)
	go func() { _, err := a.ls.Call("b", wire.OpStatus, nil); errs <- err }()
	recv(t, entered, "request served")
	a.stopOnce.Do(func() { close(a.stop) })
	a.ls.CloseAll()
	if err := recv(t, errs, "call's end"); !errors.Is(err, ErrLinkDown) {
		t.Fatalf("call in flight: %v, want ErrLinkDown", err)
	}
	if a.ls.Failures() != 0 || len(a.h.down) != 0 {
		t.Fatalf("failures %d, down %d at shutdown", a.ls.Failures(), len(a.h.down))
	}
}

// pullRec is a Puller that reports the link it was pulled on.
type pullRec struct{ pulled chan *Link }

func (p pullRec) Pull(l *Link) { p.pulled <- l }
func (p pullRec) Dropped()     { p.pulled <- nil }

// TestPull_RunsOnTheLinksDrain: a Puller runs on the link's loop at its
// next drain; a link that ended takes none.
func TestPull_RunsOnTheLinksDrain(t *testing.T) {
	nodes := newTestNodes(t, nil, "a", "b")
	l := nodes["a"].ls.Dial("b")
	p := pullRec{make(chan *Link, 1)}
	if !l.Pull(p) {
		t.Fatal("an open link refused a pull")
	}
	if got := recv(t, p.pulled, "pull"); got != l {
		t.Fatalf("pulled on %p, want %p", got, l)
	}
	if l.Conn() == nil || l.Scratch() == nil || l.Node() != "b" {
		t.Fatal("a pulled link has no conn, scratch or node")
	}
	nodes["a"].ls.CloseAll()
	if l.Pull(p) {
		t.Fatal("a closed link took a pull")
	}
}

// TestHeartbeatPaused: the heartbeat ran late by more than the timeout.
func TestHeartbeatPaused(t *testing.T) {
	const s = int64(time.Second)
	for _, tc := range []struct {
		now, last int64
		paused    bool
	}{
		{10 * s, 0, false}, // the first beat
		{10 * s, 9 * s, false},
		{10 * s, 8 * s, false}, // exactly the timeout
		{10 * s, 8*s - 1, true},
	} {
		if got := heartbeatPaused(tc.now, tc.last, 2*time.Second); got != tc.paused {
			t.Errorf("heartbeatPaused(%d, %d) = %v, want %v", tc.now, tc.last, got, tc.paused)
		}
	}
}
