package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client"
	"github.com/sluice-rtm/sluice/engine"
	"github.com/sluice-rtm/sluice/internal/proctest"
	"github.com/sluice-rtm/sluice/wire"
)

// mpSecret is the cluster secret of the multi-process test.
const mpSecret = "multi-process-test-secret-0123456789"

// mpNode is one `sluice serve` process of the multi-process test.
type mpNode struct {
	proctest.Proc
	client, gossip, raft string
	data                 string // its metadata log's directory, kept across its restarts
}

// freePort returns a loopback port that was free for TCP and UDP a moment
// ago (the gossip port needs both), chosen at random below the kernel's
// ephemeral range: a node restarted on its ports finds them free, since no
// outgoing connection of any process on the machine takes a local port
// there (a port from the ephemeral range was taken so between a kill and
// the restart once, by another test package's connections).
func freePort(t *testing.T) string {
	t.Helper()
	low := ephemeralLow()
	for range 200 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(10000+rand.IntN(low-10000)))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		return addr
	}
	t.Fatal("no free TCP+UDP port")
	return ""
}

// ephemeralLow returns the first port of the kernel's ephemeral range
// (Linux's default 32768 when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if low, err := strconv.Atoi(f[0]); err == nil && low > 11000 {
				return low
			}
		}
	}
	return 32768
}

// sluiceBin is this command built once for the tests that run it as a
// separate process; TestMain removes it.
var sluiceBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sluiceBin.dir != "" {
		_ = os.RemoveAll(sluiceBin.dir)
	}
	os.Exit(code)
}

// buildSluice builds this command (once per test binary), with the race
// detector when the tests run with it (the packages are then already
// compiled), and returns the path of the executable.
func buildSluice(t *testing.T) string {
	t.Helper()
	b := &sluiceBin
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "sluice-test-bin-"); b.err == nil {
			b.path, b.err = proctest.Build(b.dir, raceEnabled, 90*time.Second)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// mpCluster is the set of processes of one test.
type mpCluster struct {
	t     *testing.T
	bin   string
	dir   string
	nodes map[string]*mpNode
	order []string
}

// newMPCluster prepares nodes with the given names on free loopback
// ports; t.Cleanup kills their processes and, if the test failed, prints
// their logs.
func newMPCluster(t *testing.T, names ...string) *mpCluster {
	dir := t.TempDir()
	c := &mpCluster{t: t, bin: buildSluice(t), dir: dir, nodes: map[string]*mpNode{}, order: names}
	for _, name := range names {
		c.nodes[name] = &mpNode{Proc: proctest.Proc{Name: name, Log: filepath.Join(dir, name+".log")},
			client: freePort(t), gossip: freePort(t), raft: freePort(t), data: filepath.Join(dir, name+"-data")}
	}
	t.Cleanup(func() {
		for _, name := range c.order {
			n := c.nodes[name]
			n.Stop()
			if t.Failed() {
				logs, _ := os.ReadFile(n.Log)
				t.Logf("---- log of node %s ----\n%s", name, logs)
			}
		}
	})
	return c
}

// start runs node n, joining the gossip addresses in join, and waits
// until it is ready.
func (c *mpCluster) start(n *mpNode, join ...string) {
	c.t.Helper()
	args := []string{c.bin, "serve", "--node-name", n.Name, "--listen", n.client, "--cluster-listen", n.gossip,
		"--raft-listen", n.raft, "--data-dir", n.data, "--raft-timeout", "300ms",
		"--loops", "2", "--limit-msgs", "200", "--limit-life", "500ms", "--ttl", "30s",
		"--cluster-capacity", "1", "--cluster-report-interval", "200ms", "--shutdown-timeout", "2s"}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	n.Start(c.t, []string{clusterSecretEnv + "=" + mpSecret}, args...)
}

// kill stops node n with SIGKILL and waits for it to exit.
func (c *mpCluster) kill(n *mpNode) { n.Kill(c.t) }

// status runs `sluice cluster status --json` against n.
func (c *mpCluster) status(n *mpNode) (engine.Status, error) {
	return proctest.Status(c.bin, n.client, mpSecret, 5*time.Second)
}

// waitStatus polls the status of every node in ns until ok holds for all
// of them, or fails the test after d.
func (c *mpCluster) waitStatus(what string, d time.Duration, ok func(engine.Status) bool, ns ...*mpNode) {
	c.t.Helper()
	proctest.WaitUntil(c.t, what, d, 100*time.Millisecond, func() (bool, string) {
		for _, n := range ns {
			st, err := c.status(n)
			if err != nil || !ok(st) {
				return false, fmt.Sprintf("%s: %+v %v", n.Name, st, err)
			}
		}
		return true, ""
	})
}

// aliveMembers counts the members in state alive.
func aliveMembers(st engine.Status) int { return proctest.Alive(st) }

// chanNames returns n channel names: prefix.0 .. prefix.n-1 (the
// metadata log's leader manages every channel: a name chooses nothing).
func chanNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + "." + strconv.Itoa(i)
	}
	return out
}

func mpPayload(i int) []byte { return []byte("m" + strconv.Itoa(i)) }

// unavailable reports whether err is an ERROR UNAVAILABLE answer.
func unavailable(err error) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == wire.CodeUnavailable
}

// publishRetrying publishes payload until it is acknowledged; only
// UNAVAILABLE answers (the cluster moving a channel) are retried.
func publishRetrying(ctx context.Context, conn *client.Conn, ch string, payload []byte) (uint64, int, error) {
	for retries := 0; ; retries++ {
		pos, err := conn.Publish(ctx, ch, payload)
		if err == nil || !unavailable(err) || ctx.Err() != nil {
			return pos, retries, err
		}
	}
}

// collect reads sub's events until one reaches position last.
func collect(ctx context.Context, sub *client.Subscription, last uint64) ([]client.Event, error) {
	var evs []client.Event
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return evs, fmt.Errorf("after %d events: %w", len(evs), err)
		}
		evs = append(evs, ev)
		switch {
		case ev.Kind == client.KindMessage && ev.Position >= last,
			ev.Kind == client.KindGap && ev.Gap.To >= last:
			return evs, nil
		}
	}
}

// checkExact checks that evs are exactly the acked messages (position ->
// message index) in position order, with no gap and nothing else.
func checkExact(evs []client.Event, acked map[uint64]int) error {
	var prev, prev0 uint64
	seen := 0
	for _, ev := range evs {
		if ev.Kind != client.KindMessage {
			return fmt.Errorf("unexpected %v event %+v", ev.Kind, ev.Gap)
		}
		if ev.Position <= prev {
			return fmt.Errorf("position %d after %d", ev.Position, prev)
		}
		prev = ev.Position
		i, ok := acked[ev.Position]
		if !ok || !bytes.Equal(ev.Payload, mpPayload(i)) {
			where := "was not acked"
			for p, j := range acked {
				if bytes.Equal(ev.Payload, mpPayload(j)) {
					where = fmt.Sprintf("was acked at position %d", p)
				}
			}
			return fmt.Errorf("event %d: position %d holds %q, which %s (position %d acked %v for message %d; previous event at %d)",
				seen, ev.Position, ev.Payload, where, ev.Position, ok, i, prev0)
		}
		prev0 = ev.Position
		seen++
	}
	if seen != len(acked) {
		return fmt.Errorf("%d of %d acknowledged messages delivered", seen, len(acked))
	}
	return nil
}

// checkSurvivor checks what a subscriber saw across a node's death:
// strictly increasing positions; only GAP lost; every acked message
// delivered with its payload or inside a gap; messages not acked only if
// their publish failed (its outcome unknown), each at most once.
func checkSurvivor(evs []client.Event, acked map[uint64]int, failed map[int]bool) (delivered, lost, gaps int, err error) {
	var next uint64
	got := map[uint64]bool{}
	payloads := map[string]bool{}
	var gapList []client.GapInfo
	for _, ev := range evs {
		switch ev.Kind {
		case client.KindMessage:
			if next != 0 && ev.Position < next {
				return 0, 0, 0, fmt.Errorf("position %d after %d: out of order or repeated", ev.Position, next-1)
			}
			next = ev.Position + 1
			if payloads[string(ev.Payload)] {
				return 0, 0, 0, fmt.Errorf("message %q delivered twice", ev.Payload)
			}
			payloads[string(ev.Payload)] = true
			if i, ok := acked[ev.Position]; ok {
				if !bytes.Equal(ev.Payload, mpPayload(i)) {
					return 0, 0, 0, fmt.Errorf("position %d holds %q, acked for %q", ev.Position, ev.Payload, mpPayload(i))
				}
			} else {
				i, err := strconv.Atoi(strings.TrimPrefix(string(ev.Payload), "m"))
				if err != nil || !failed[i] {
					return 0, 0, 0, fmt.Errorf("position %d holds %q, which was neither acked nor failed", ev.Position, ev.Payload)
				}
			}
			got[ev.Position] = true
		case client.KindGap:
			if ev.Gap.Reason != wire.GapLost {
				return 0, 0, 0, fmt.Errorf("gap %d-%d with reason %v", ev.Gap.From, ev.Gap.To, ev.Gap.Reason)
			}
			if next != 0 && ev.Gap.From < next {
				return 0, 0, 0, fmt.Errorf("gap %d-%d overlaps position %d", ev.Gap.From, ev.Gap.To, next-1)
			}
			gapList = append(gapList, ev.Gap)
			next = ev.Gap.To + 1
		default:
			return 0, 0, 0, fmt.Errorf("unexpected %v event", ev.Kind)
		}
	}
	for p := range acked {
		if got[p] {
			delivered++
			continue
		}
		in := false
		for _, g := range gapList {
			in = in || (p >= g.From && p <= g.To)
		}
		if !in {
			return 0, 0, 0, fmt.Errorf("acked position %d neither delivered nor announced lost (gaps %v)", p, gapList)
		}
		lost++
	}
	return delivered, lost, len(gapList), nil
}

// TestMultiProcessCluster runs three `sluice serve` processes as a
// cluster: status through `sluice cluster status`, publish on one node and
// subscribe on the two others, kill -9 of a node during publishing, and
// its restart and rejoin.
func TestMultiProcessCluster(t *testing.T) {
	names := []string{"a", "b", "c"}
	c := newMPCluster(t, names...)
	a, b, cn := c.nodes["a"], c.nodes["b"], c.nodes["c"]
	c.start(a)
	c.start(b, a.gossip)
	c.start(cn, a.gossip)
	all3 := func(st engine.Status) bool { return len(st.Members) == 3 && aliveMembers(st) == 3 }
	c.waitStatus("three alive members everywhere", 30*time.Second, all3, a, b, cn)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dial := func(n *mpNode) *client.Conn {
		conn, err := client.Dial(ctx, n.client, client.WithName("mp-"+n.Name))
		if err != nil {
			t.Fatalf("dial %s: %v", n.Name, err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	pub := dial(a)

	// 1. Publish on a, subscribe on b and c: both see everything, in order.
	// The channel is managed by a, so its streamlets rotate over b and c.
	ch := chanNames("mp.fanout", 1)[0]
	first, retries, err := publishRetrying(ctx, pub, ch, []byte("warm-up"))
	if err != nil {
		t.Fatalf("first publish: %v", err)
	}
	var subs []*client.Subscription
	for _, n := range []*mpNode{b, cn} {
		sub, err := dial(n).Subscribe(ctx, ch, client.FromPosition(first+1), client.WithBuffer(4096))
		if err != nil {
			t.Fatalf("subscribe on %s: %v", n.Name, err)
		}
		subs = append(subs, sub)
	}
	acked := map[uint64]int{}
	var last uint64
	for i := range 2000 {
		pos, r, err := publishRetrying(ctx, pub, ch, mpPayload(i))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		retries += r
		if pos <= last {
			t.Fatalf("publish %d: position %d after %d", i, pos, last)
		}
		acked[pos], last = i, pos
	}
	for k, sub := range subs {
		evs, err := collect(ctx, sub, last)
		if err == nil {
			err = checkExact(evs, acked)
		}
		if err != nil {
			t.Fatalf("subscriber %d: %v", k, err)
		}
	}
	t.Logf("phase 1: 2000 messages delivered to 2 subscribers (%d publishes retried after UNAVAILABLE)", retries)

	// 2. Keep publishing on a to several channels (so that c is likely to
	// host some channel's open streamlet) and kill -9 c on the way:
	// publishing resumes, and b's subscribers see every acked message but
	// those announced lost.
	const nch = 4
	chans := chanNames("mp.failover", nch)
	subConn := dial(b)
	type track struct {
		sub    *client.Subscription
		first  uint64 // the warm-up publish
		acked  map[uint64]int
		failed map[int]bool
		last   uint64
	}
	tracks := make([]*track, nch)
	for k, ch := range chans {
		first, _, err := publishRetrying(ctx, pub, ch, []byte("warm-up"))
		if err != nil {
			t.Fatalf("first publish to %s: %v", ch, err)
		}
		sub, err := subConn.Subscribe(ctx, ch, client.FromPosition(first+1), client.WithBuffer(1<<15))
		if err != nil {
			t.Fatal(err)
		}
		tracks[k] = &track{sub: sub, first: first, acked: map[uint64]int{}, failed: map[int]bool{}}
	}
	// A subscriber connected to c only: when c dies it reconnects to a
	// node it learned from WELCOME and resumes after its last event.
	cConn, err := client.Dial(ctx, cn.client, client.WithName("mp-c-sub"), client.WithBackoff(20*time.Millisecond, 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cConn.Close() })
	if w, ok := cConn.Welcome(); !ok || len(w.Nodes) < 3 {
		t.Fatalf("c's WELCOME lists nodes %v, want all three", w.Nodes)
	}
	cSub, err := cConn.Subscribe(ctx, chans[0], client.FromPosition(tracks[0].first+1), client.WithBuffer(1<<15))
	if err != nil {
		t.Fatal(err)
	}
	var killedAt time.Time
	afterKill, unknown, unavail := 0, 0, 0
	deadline := time.Now().Add(40 * time.Second)
	for i := 0; killedAt.IsZero() || afterKill < 1500 || time.Since(killedAt) < 3*time.Second; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("publishing did not resume after the kill: %d acked after it, %d unavailable, %d unknown", afterKill, unavail, unknown)
		}
		if i == 1500 {
			c.kill(cn)
			killedAt = time.Now()
		}
		tr := tracks[i%nch]
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		pos, err := pub.Publish(pctx, chans[i%nch], mpPayload(i))
		pcancel()
		switch {
		case err == nil:
		case killedAt.IsZero():
			t.Fatalf("publish %d before the kill: %v", i, err)
		case unavailable(err):
			unavail++
			tr.failed[i] = true
			continue
		case errors.Is(err, client.ErrUnknownOutcome):
			unknown++
			tr.failed[i] = true
			continue
		default:
			t.Fatalf("publish %d after the kill: %v", i, err)
		}
		if pos <= tr.last {
			t.Fatalf("publish %d: position %d after %d", i, pos, tr.last)
		}
		tr.acked[pos], tr.last = i, pos
		if !killedAt.IsZero() {
			afterKill++
		}
	}
	for k, tr := range tracks {
		evs, err := collect(ctx, tr.sub, tr.last)
		if err != nil {
			t.Fatalf("subscriber of %s on b: %v", chans[k], err)
		}
		delivered, lost, gaps, err := checkSurvivor(evs, tr.acked, tr.failed)
		if err != nil {
			t.Fatalf("subscriber of %s on b: %v", chans[k], err)
		}
		t.Logf("phase 2, %s: %d acked, %d delivered, %d announced lost in %d gaps", chans[k], len(tr.acked), delivered, lost, gaps)
	}
	t.Logf("phase 2: %d publishes UNAVAILABLE, %d of unknown outcome around the kill", unavail, unknown)
	evs, err := collect(ctx, cSub, tracks[0].last)
	if err != nil {
		t.Fatalf("subscriber of %s on c, resumed: %v", chans[0], err)
	}
	delivered, lost, gaps, err := checkSurvivor(evs, tracks[0].acked, tracks[0].failed)
	if err != nil {
		t.Fatalf("subscriber of %s on c, resumed: %v", chans[0], err)
	}
	t.Logf("phase 2, %s, subscriber on c resumed (addresses %v): %d delivered, %d announced lost in %d gaps", chans[0], cConn.Addrs(), delivered, lost, gaps)

	// 3. Restart c with the same name and addresses: it rejoins and hosts
	// new streamlets.
	c.start(cn, a.gossip)
	c.waitStatus("c rejoined", 30*time.Second, all3, a, b, cn)
	hosts := func(st engine.Status) bool {
		for _, m := range st.Members {
			if m.Name == "c" {
				return m.Streamlets > 0
			}
		}
		return false
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // several channels, so that new streamlets are placed
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			_, _ = pub.Publish(pctx, fmt.Sprintf("mp.rejoin.%d", i%16), mpPayload(i))
			pcancel()
		}
	}()
	c.waitStatus("c hosts streamlets again", 30*time.Second, hosts, a)
	close(stop)
	wg.Wait()
}
