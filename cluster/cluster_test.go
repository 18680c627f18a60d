package cluster

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-rtm/sluice/cluster/nodelink"
	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/manager"
	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// TestNodeOps_RoundTrip: every op body decodes to what was encoded (the
// encoder and the decoder of each op sit side by side in nodeops.go).
func TestNodeOps_RoundTrip(t *testing.T) {
	g := role.Grant{Channel: "orders", Epoch: 1 << 40, Streamlet: 77, Host: "b", First: 1<<40 + 5,
		LimitMsgs: 5000, LimitSize: 2 << 20, LeaseEnd: 1_800_000_000_000_000_000}
	var e wire.NodeEnc
	encGrant(&e, g)
	d := wire.NewNodeDec(wire.TypeNodeResponse, e.B)
	if got := decGrant(d); !reflect.DeepEqual(got, g) || d.Done() != nil {
		t.Fatalf("grant %+v (%v), want %+v", got, d.Done(), g)
	}
	g.Replicas = []string{"b", "c", "a"}
	e = wire.NodeEnc{}
	encGrant(&e, g)
	d = wire.NewNodeDec(wire.TypeNodeResponse, e.B)
	if got := decGrant(d); !reflect.DeepEqual(got, g) || d.Done() != nil {
		t.Fatalf("replicated grant %+v (%v), want %+v", got, d.Done(), g)
	}
	// HOST: the grant and the streamlets before it (without: an empty list).
	for _, prior := range [][]role.StreamletRef{nil, {
		{ID: 3, Host: "c", First: 100, End: 107, Closed: true},
		{ID: 4, Host: "", First: 107, End: 1<<40 + 5, Closed: true},
	}} {
		hg := g
		hg.Prior = prior
		e = wire.NodeEnc{}
		encHost(&e, hg)
		d = wire.NewNodeDec(wire.TypeNodeRequest, e.B)
		if got := decHost(d, len(e.B)); !reflect.DeepEqual(got, hg) || d.Done() != nil {
			t.Fatalf("host %+v (%v), want %+v", got, d.Done(), hg)
		}
	}
	// DEDUP_IDS: request and a page.
	e = wire.NodeEnc{}
	encIDsRequest(&e, []uint64{9, 10}, 17, -3)
	d = wire.NewNodeDec(wire.TypeNodeRequest, e.B)
	if ids, from, since := decIDsRequest(d, len(e.B)); !slices.Equal(ids, []uint64{9, 10}) || from != 17 || since != -3 || d.Done() != nil {
		t.Fatalf("dedup ids request %v %d %d %v", ids, from, since, d.Done())
	}
	pg := host.IDPage{Done: 1, Next: 40, IDs: []host.StoredID{
		{K: 0, Index: 2, Stamp: 5, ID: []byte("a")}, {K: 0, Index: 7, Stamp: 6, ID: []byte("bb")}, {K: 1, Index: 0, Stamp: 6, ID: []byte{0, 255}}}}
	e = wire.NodeEnc{}
	encIDPage(&e, pg)
	if got, err := decIDPage(e.B, 2); err != nil || !reflect.DeepEqual(got, pg) {
		t.Fatalf("page %+v %v, want %+v", got, err, pg)
	}
	if _, err := decIDPage(e.B, 1); err == nil {
		t.Fatal("a page naming streamlet 1 of a request of 1 decoded")
	}

	hs := []role.Hosted{
		{ID: 1, Epoch: 9, First: 100, Host: "b", Len: 7, Sealed: true, LeaseEnd: 4, LimitMsgs: 10},
		{ID: 3, Epoch: 9, First: 107, Host: "b", Len: 2, LeaseEnd: 8, LimitMsgs: 10},
		{ID: 4, Epoch: 9, First: 109, Host: "b", Len: 2, LeaseEnd: 8, LimitMsgs: 10, Replicas: []string{"c", "b"},
			Sealed: true, Fenced: true, Final: true},
	}
	e = wire.NodeEnc{}
	encHosted(&e, hs)
	if got, err := DecodeHosted(e.B, "b"); err != nil || !reflect.DeepEqual(got, hs) {
		t.Fatalf("hosted %+v %v, want %+v", got, err, hs)
	}
	// Unknown flags are malformed.
	e.B[2+8+8+8+4] |= 0x40
	if got, err := DecodeHosted(e.B, "b"); err == nil {
		t.Fatalf("unknown flags decoded: %+v", got)
	}
	// FENCE's answer.
	for _, tl := range []role.Tail{{Held: 7}, {Held: 9, Final: true}} {
		e = wire.NodeEnc{}
		encTail(&e, tl)
		if got, err := decTail(e.B); err != nil || got != tl {
			t.Fatalf("tail %+v %v, want %+v", got, err, tl)
		}
	}
}

// TestNodeOps_BadReplicaSets: a replica set that repeats a node, has
// fewer than two or more than maxReplicas entries, or does not start with
// the host is malformed.
func TestNodeOps_BadReplicaSets(t *testing.T) {
	g := role.Grant{Channel: "c", Epoch: 1, Streamlet: 2, Host: "a", First: 3, LimitMsgs: 10, LimitSize: 100, LeaseEnd: 4}
	base := wire.NodeEnc{}
	encGrant(&base, g)
	for _, tc := range []struct {
		name  string
		names []string
	}{
		{"repeated", []string{"a", "a"}},
		{"one", []string{"a"}},
		{"not led by the host", []string{"b", "a"}},
		{"empty name", []string{"a", ""}},
		{"too many", []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q"}},
	} {
		e := wire.NodeEnc{B: append([]byte(nil), base.B...)}
		e.U8(uint8(len(tc.names)))
		for _, n := range tc.names {
			e.Str8(n)
		}
		d := wire.NewNodeDec(wire.TypeNodeRequest, e.B)
		if got := decGrant(d); d.Done() == nil {
			t.Errorf("%s: decoded %+v", tc.name, got)
		}
	}
}

// TestNodeOps_CountsBoundedByTheBody: a count that the body cannot hold
// is refused before anything is allocated for it.
func TestNodeOps_CountsBoundedByTheBody(t *testing.T) {
	var e wire.NodeEnc
	e.U16(0xFFFF)
	if _, err := DecodeHosted(e.B, "b"); err == nil {
		t.Fatal("a hosted list claiming 65535 entries in 2 bytes decoded")
	}
	e = wire.NodeEnc{}
	e.U16(1000) // 1000 prior streamlets in a grant's bytes
	encGrant(&e, role.Grant{Channel: "c", LimitMsgs: 1, LimitSize: 1})
	if d := wire.NewNodeDec(wire.TypeNodeRequest, e.B); decHost(d, len(e.B)).Prior != nil || d.Err() == nil {
		t.Fatal("a HOST claiming 1000 prior streamlets decoded")
	}
	e = wire.NodeEnc{}
	e.I64(0)
	e.U32(0)
	e.U16(1000)
	if d := wire.NewNodeDec(wire.TypeNodeRequest, e.B); func() bool { ids, _, _ := decIDsRequest(d, len(e.B)); return ids != nil }() || d.Err() == nil {
		t.Fatal("a DEDUP_IDS request claiming 1000 streamlets decoded")
	}
	e = wire.NodeEnc{}
	e.U16(0)
	e.U32(0)
	e.U16(0xFFFF)
	if _, err := decIDPage(e.B, 1); err == nil {
		t.Fatal("a page claiming 65535 ids in 8 bytes decoded")
	}
}

// nopTransport enrolls nothing (a cluster of one dials no link).
type nopTransport struct{}

func (nopTransport) Enroll(net.Conn, nodelink.Enrolled, time.Time) error {
	return errors.New("cluster test: no event loops")
}

type nopGateway struct{}

func (nopGateway) Changed(string)              {}
func (nopGateway) HostDown(string)             {}
func (nopGateway) Copy(uint64) *host.Streamlet { return nil }
func (nopGateway) Wake(string)                 {}
func (nopGateway) SetNodes([]string)           {}
func (nopGateway) Conns() int                  { return 0 }
func (nopGateway) CutOff()                     {}

// TestShutdown_StopsEveryGoroutine: the pool's workers, the interest
// worker, the leader watcher, the metadata log and the pool's running
// calls end with Shutdown, and Go refuses work afterwards. The cluster's own goroutines are counted the instant
// Shutdown returns (internal/owned), with no grace period: a call still
// running then (its 200 ms stand for a request waiting for the network)
// fails it, though goleak's retries, which follow, would let it pass.
func TestShutdown_StopsEveryGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := unstarted(t, "a", host.New("a", time.Now), meta.New(), Options{Listen: "127.0.0.1:0", RaftTimeout: 100 * time.Millisecond})
	if err := c.Start("127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	if !c.Go(func() { close(ran) }) {
		t.Fatal("Go refused work on a running cluster")
	}
	<-ran
	started := make(chan struct{})
	if !c.Go(func() { close(started); time.Sleep(200 * time.Millisecond) }) {
		t.Fatal("Go refused work on a running cluster")
	}
	<-started
	c.Interest("ch", 1) // the interest worker runs it (this node manages everything)
	c.Shutdown()
	if n := c.Goroutines(); n != 0 {
		t.Fatalf("%d of the cluster's goroutines still run when Shutdown returned", n)
	}
	if c.Go(func() {}) {
		t.Fatal("Go took work after Shutdown")
	}
}

// TestGo_RefusesWhenFull: Go never blocks; past the queue it refuses.
func TestGo_RefusesWhenFull(t *testing.T) {
	c := &Cluster{stop: make(chan struct{}), jobs: make(chan func(), 2)}
	for i := 0; i < 2; i++ {
		if !c.Go(func() {}) {
			t.Fatalf("call %d refused with room in the queue", i)
		}
	}
	if c.Go(func() {}) {
		t.Fatal("a call beyond the queue was taken")
	}
}

// TestLeaderCall_BeforeTheLogStarted: a request for the leader (a
// channel's creation, here) that arrives before this node's metadata log
// started waits for it as for a leader and fails UNAVAILABLE after the
// call timeout; it panicked on the missing log (nemesis seed 4: a
// restarted node took a client's SUBSCRIBE before its log was up).
func TestLeaderCall_BeforeTheLogStarted(t *testing.T) {
	c := unstarted(t, "a", host.New("a", time.Now), meta.New(), Options{Listen: "127.0.0.1:0", RPCTimeout: 20 * time.Millisecond})
	if _, _, err := c.Info("ch", true); !errors.Is(err, role.ErrUnavailable) {
		t.Fatalf("Info before the log started: %v, want UNAVAILABLE", err)
	}
}

// unstarted returns node self's Cluster over h and st with a manager, not
// started (no links, no metadata log).
func unstarted(t *testing.T, self string, h *host.Host, st *meta.State, o Options) *Cluster {
	t.Helper()
	lim := role.Limits{Msgs: 10, Size: 1 << 20, Life: time.Second, TTL: time.Minute}
	c := New(Config{Self: self, Instance: self + "1", Host: h, State: st, Gateway: nopGateway{}, Options: o,
		Limits: func(string) role.Limits { return lim },
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: time.Now, Transport: nopTransport{}})
	c.SetManager(manager.New(manager.Config{Node: self, NewID: h.NewID, Clock: time.Now, State: st, Log: c.Hooks(), Cluster: c.Hooks(),
		Limits: func(string) role.Limits { return lim }}))
	return c
}
