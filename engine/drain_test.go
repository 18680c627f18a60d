package engine

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// TestCluster_DrainedNodeLosesNothing: a node that drains hands what it
// holds to the others before it goes: its clients get GOAWAY and new
// ones are refused, it is chosen for no new streamlet, its sealed
// streamlets are copied to the other nodes and listed there, and after
// it shut down a replay from another node reads every message, with no
// GAP (after a kill the same replay reports its streamlets lost:
// TestCluster_ReplayAfterHostDeathReportsExactlyTheLostStreamlets).
func TestCluster_DrainedNodeLosesNothing(t *testing.T) {
	nodes := startCluster3(t, nil)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ch := channelManagedBy(t, a, "a", "drain")
	pub, _ := helloRaw(t, a.Addr())
	const n = 700 // 7 full streamlets of 100 on b and c
	pos, payloads, onC := publishCounting(t, a, pub, ch, n, "c")
	// c leads now (it manages every channel): its drain hands the
	// leadership over too.
	chC := channelManagedBy(t, a, "c", "drainmgr")
	posC, err := pub.publishBatch(chC, payloads[:250])
	if err != nil {
		t.Fatal(err)
	}
	client, _ := helloRaw(t, c.Addr())

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- c.Drain(ctx) }()

	// c's client is sent away, and c takes no new client.
	for {
		h, body := client.next()
		if h.Type == wire.TypeGoAway {
			g, err := wire.DecodeGoAway(body)
			if err != nil || g.Code != wire.CodeShuttingDown {
				t.Fatalf("GOAWAY %+v %v, want SHUTTING_DOWN", g, err)
			}
			break
		}
	}
	late := dialRaw(t, c.Addr())
	late.write(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1}))
	if e := late.expectError(); e.Code != wire.CodeShuttingDown {
		t.Fatalf("HELLO to a draining node: %v, want SHUTTING_DOWN", e)
	}
	eventually(t, waitFor, "a sees c draining", func() bool {
		st, _ := a.Cluster()
		for _, m := range st.Members {
			if m.Name == "c" {
				return m.State == "draining" && m.Draining
			}
		}
		return false
	})
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !c.Metrics(ctx).Draining {
		t.Fatalf("while draining: /readyz %d, metrics draining %v; want 503 and true", rec.Code, c.Metrics(ctx).Draining)
	}
	// Publishing goes on meanwhile, never onto c.
	more, err := pub.publishBatch(ch, payloads[:300])
	if err != nil {
		t.Fatal(err)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	info, _ := stateInfo(a, ch)
	for _, r := range info.Streamlets {
		if r.Host == "c" || r.Lost {
			t.Fatalf("after the drain: %+v on c or lost (list %+v)", r, info.Streamlets)
		}
	}
	da, _, _, _ := a.mgr.CopyStats()
	db, _, _, _ := b.mgr.CopyStats()
	dc, _, _, _ := c.mgr.CopyStats() // c led when its drain began
	if da+db+dc < int64(onC) {
		t.Errorf("the leaders made %d copies, want at least the %d streamlets c held", da+db+dc, onC)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitFor, "a sees c gone", func() bool { return a.clu().Alive() == 2 })

	for k, tc := range []struct {
		ch   string
		pos  []uint64
		pays [][]byte
	}{{ch, append(pos, more...), append(payloads, payloads[:300]...)}, {chC, posC, payloads[:250]}} {
		sub, _ := helloRaw(t, b.Addr())
		id := uint32(k + 1)
		s := sub.subscribe(id, tc.ch, wire.StartEarliest, 0)
		if s.First != tc.pos[0] {
			t.Fatalf("%s: earliest %d, want %d", tc.ch, s.First, tc.pos[0])
		}
		last := tc.pos[len(tc.pos)-1]
		evs, err := sub.eventsUntil(id, last)
		if err != nil {
			t.Fatal(err)
		}
		msgs, gaps, err := checkStream(evs, id, tc.pos[0], last)
		if err != nil {
			t.Fatal(err)
		}
		if len(gaps) != 0 {
			t.Fatalf("%s: gaps %v after a drain, want none", tc.ch, gaps)
		}
		for i, p := range tc.pos {
			if msgs[p] != string(tc.pays[i]) {
				t.Fatalf("%s: position %d: %q, want %q", tc.ch, p, msgs[p], tc.pays[i])
			}
		}
	}
}

// TestDrain_SingleNodeReturnsAtOnce: without a cluster Drain does nothing
// and Shutdown behaves as before.
func TestDrain_SingleNodeReturnsAtOnce(t *testing.T) {
	s := startTest(t, nil)
	c, _ := helloRaw(t, s.Addr())
	if err := s.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.Draining() {
		t.Fatal("a single node reports draining")
	}
	c.write(wire.AppendPing(nil, 7))
	if h, _ := c.next(); h.Type != wire.TypePong {
		t.Fatalf("after Drain on a single node: %v, want PONG", h.Type)
	}
}

// TestCluster_ReReplicationAfterANodeDeath: with Replicas 2, the death of
// one replica leaves the closed streamlets it held with one holder; the
// manager copies each from the holder left to the third node (chosen by
// load, distinct from the holders), so every closed streamlet has two
// live holders again, and the copies hold the messages.
func TestCluster_ReReplicationAfterANodeDeath(t *testing.T) {
	nodes := startCluster3(t, withReplicas(2))
	a, b, c := nodes[0], nodes[1], nodes[2]
	ch := channelManagedBy(t, a, "a", "rerepl")
	pub, _ := helloRaw(t, a.Addr())
	payloads := payloadsOf(500) // 5 full streamlets of 100
	pos, err := pub.publishBatch(ch, payloads)
	if err != nil {
		t.Fatal(err)
	}
	// The victim: a follower (not the first holder) of some closed
	// streamlet, whose first holder is not the victim either.
	before, _ := stateInfo(a, ch)
	var victim *Server
	for _, r := range before.Streamlets {
		if r.Closed && len(r.Replicas) == 2 && r.Host != "c" && r.Replicas[1] == "c" {
			victim = c
		}
		if r.Closed && len(r.Replicas) == 2 && r.Host != "b" && r.Replicas[1] == "b" && victim == nil {
			victim = b
		}
	}
	if victim == nil {
		t.Fatalf("no closed streamlet with a follower on b or c: %+v", before.Streamlets)
	}
	name := victim.opts.ServerName
	kill(victim)
	eventually(t, 2*waitFor, "every closed streamlet held by two live nodes again", func() bool {
		info, _ := stateInfo(a, ch)
		for _, r := range info.Streamlets {
			if !r.Closed || r.Lost || r.Host == name {
				continue // a streamlet the victim ordered is lost: replication proper is not this test's
			}
			live := 0
			for _, h := range r.Set() {
				if h != name {
					live++
				}
			}
			if live < 2 {
				return false
			}
		}
		return true
	})
	if done, _, _, _ := a.mgr.CopyStats(); done == 0 {
		t.Fatal("no copy made")
	}
	// The copies serve reads: every streamlet the victim did not order
	// reads back whole from the survivors.
	info, _ := stateInfo(a, ch)
	for _, r := range info.Streamlets {
		if !r.Closed || r.Lost || r.Host == name || r.End == r.First {
			continue
		}
		for _, h := range r.Set() {
			var srv *Server
			for _, s := range nodes {
				if s.opts.ServerName == h && s != victim {
					srv = s
				}
			}
			if srv == nil {
				continue
			}
			s := srv.host.Streamlet(r.ID)
			if s == nil || s.Buf().Len() != int(r.End-r.First) {
				t.Fatalf("streamlet %d [%d, %d) on %s: %v", r.ID, r.First, r.End, h, s)
			}
			i := int(r.First - pos[0])
			if got := string(s.Buf().Get(0)); i >= 0 && i < len(payloads) && got != string(payloads[i]) {
				t.Fatalf("streamlet %d on %s starts with %q, want %q", r.ID, h, got, payloads[i])
			}
		}
	}
}
