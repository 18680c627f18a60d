package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder collects OnChange events.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) on(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// count returns how many events of kind concern name.
func (r *recorder) count(kind EventKind, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := 0
	for _, e := range r.events {
		if e.Kind == kind && e.Member.Name == name {
			k++
		}
	}
	return k
}

// find returns the last event of kind for name whose meta is meta.
func (r *recorder) find(kind EventKind, name string, meta []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Kind == kind && e.Member.Name == name && bytes.Equal(e.Member.Meta, meta) {
			return true
		}
	}
	return false
}

// tnode is a test member with settable metadata.
type tnode struct {
	*Node
	rec  *recorder
	meta atomic.Pointer[[]byte]
}

func (tn *tnode) setMeta(s string) {
	b := []byte(s)
	tn.meta.Store(&b)
}

// start starts a member on 127.0.0.1 (port 0 unless bind is given) with meta
// "meta-<name>" and registers its Shutdown as cleanup.
func start(t *testing.T, name, bind string, join []string, mod func(*Config)) *tnode {
	t.Helper()
	tn := &tnode{rec: &recorder{}}
	tn.setMeta("meta-" + name)
	if bind == "" {
		bind = "127.0.0.1:0"
	}
	cfg := Config{
		Name:     name,
		BindAddr: bind,
		Join:     join,
		Meta:     func() []byte { return *tn.meta.Load() },
		OnChange: tn.rec.on,
	}
	if mod != nil {
		mod(&cfg)
	}
	n, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start(%s): %v", name, err)
	}
	tn.Node = n
	t.Cleanup(func() { _ = n.Shutdown() })
	return tn
}

// waitFor polls cond every 10 ms until it holds or d elapses.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}

// member returns name's entry in ms.
func member(ms []Member, name string) (Member, bool) {
	for _, m := range ms {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

func names(ms []Member) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.Name + "/" + m.State.String()
	}
	return strings.Join(s, ",")
}

// cluster3 starts a, b, c, with b and c joining through a, and waits until
// every member sees all three.
func cluster3(t *testing.T) (a, b, c *tnode) {
	t.Helper()
	a = start(t, "a", "", nil, nil)
	b = start(t, "b", "", []string{a.Addr()}, nil)
	c = start(t, "c", "", []string{a.Addr()}, nil)
	for _, n := range []*tnode{a, b, c} {
		waitFor(t, 5*time.Second, n.Name()+" sees 3 members", func() bool { return len(n.Members()) == 3 })
	}
	return a, b, c
}

func TestThreeMembersJoinThroughOneSeed(t *testing.T) {
	a, b, c := cluster3(t)
	for _, n := range []*tnode{a, b, c} {
		ms := n.Members()
		if got := names(ms); got != "a/alive,b/alive,c/alive" {
			t.Fatalf("%s: members %s", n.Name(), got)
		}
		for _, m := range ms {
			if want := "meta-" + m.Name; string(m.Meta) != want {
				t.Errorf("%s sees %s meta %q, want %q", n.Name(), m.Name, m.Meta, want)
			}
			if m.Local != (m.Name == n.Name()) {
				t.Errorf("%s sees %s Local=%v", n.Name(), m.Name, m.Local)
			}
			if m.Name == "b" && m.Addr != b.Addr() {
				t.Errorf("%s sees b at %s, want %s", n.Name(), m.Addr, b.Addr())
			}
		}
		// Every node got EventJoin for itself (inside Start) and the others.
		for _, other := range []string{"a", "b", "c"} {
			if n.rec.count(EventJoin, other) != 1 {
				t.Errorf("%s: %d EventJoin for %s, want 1", n.Name(), n.rec.count(EventJoin, other), other)
			}
		}
	}
}

func TestAddrReportsBoundPort(t *testing.T) {
	a := start(t, "a", "", nil, nil)
	host, port, err := net.SplitHostPort(a.Addr())
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("Addr() = %q (%v), want 127.0.0.1 and a real port", a.Addr(), err)
	}
	// The port really is ours: TCP connects.
	conn, err := net.DialTimeout("tcp", a.Addr(), time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", a.Addr(), err)
	}
	conn.Close()
}

func TestUpdateMetaPropagates(t *testing.T) {
	a, b, c := cluster3(t)
	a.setMeta("load=42")
	if err := a.UpdateMeta(2 * time.Second); err != nil {
		t.Fatalf("UpdateMeta: %v", err)
	}
	for _, n := range []*tnode{a, b, c} {
		waitFor(t, 5*time.Second, n.Name()+" sees a's new meta", func() bool {
			m, ok := member(n.Members(), "a")
			return ok && string(m.Meta) == "load=42" && n.rec.find(EventUpdate, "a", []byte("load=42"))
		})
	}
}

func TestKilledMemberDeclaredDead(t *testing.T) {
	a, b, c := cluster3(t)
	killed := time.Now()
	if err := c.Shutdown(); err != nil { // no Leave: like kill -9
		t.Fatal(err)
	}
	for _, n := range []*tnode{a, b} {
		waitFor(t, 10*time.Second, n.Name()+" drops c", func() bool {
			_, ok := member(n.Members(), "c")
			return !ok && n.rec.count(EventLeave, "c") == 1
		})
		m, ok := member(n.All(), "c")
		if !ok || m.State != Dead {
			t.Fatalf("%s: All() = %s, want c dead", n.Name(), names(n.All()))
		}
	}
	t.Logf("killed member dropped by both peers after %v", time.Since(killed).Round(10*time.Millisecond))
}

func TestLeaveIsAnnounced(t *testing.T) {
	a, b, c := cluster3(t)
	if err := c.Leave(3 * time.Second); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := c.Leave(time.Second); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
	if m, ok := member(c.All(), "c"); !ok || m.State != Left {
		t.Fatalf("leaver's own view: %s, want c left", names(c.All()))
	}
	for _, n := range []*tnode{a, b} {
		waitFor(t, 5*time.Second, n.Name()+" sees c left", func() bool {
			m, ok := member(n.All(), "c")
			return ok && m.State == Left && n.rec.count(EventLeave, "c") == 1
		})
		if _, ok := member(n.Members(), "c"); ok {
			t.Fatalf("%s still lists c in Members: %s", n.Name(), names(n.Members()))
		}
	}
	if err := c.UpdateMeta(time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("UpdateMeta after Leave: %v, want ErrClosed", err)
	}
	if _, err := c.Join([]string{a.Addr()}); !errors.Is(err, ErrClosed) {
		t.Errorf("Join after Leave: %v, want ErrClosed", err)
	}
}

// A broadcast timeout only means "not confirmed yet": the change still spreads.
func TestBroadcastTimeoutStillPropagates(t *testing.T) {
	a := start(t, "a", "", nil, nil)
	b := start(t, "b", "", []string{a.Addr()}, nil)
	waitFor(t, 5*time.Second, "a sees b", func() bool { return len(a.Members()) == 2 })

	a.setMeta("late")
	if err := a.UpdateMeta(time.Nanosecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("UpdateMeta(1ns) = %v, want ErrTimeout", err)
	}
	waitFor(t, 5*time.Second, "b sees the update", func() bool {
		m, ok := member(b.Members(), "a")
		return ok && string(m.Meta) == "late"
	})
	if err := a.Leave(time.Nanosecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Leave(1ns) = %v, want ErrTimeout", err)
	}
	waitFor(t, 5*time.Second, "b sees a leave", func() bool {
		_, ok := member(b.Members(), "a")
		return !ok && b.rec.count(EventLeave, "a") == 1
	})
}

func TestRestartWithSameNameAndAddress(t *testing.T) {
	a, b, c := cluster3(t)
	addr := c.Addr()
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*tnode{a, b} {
		waitFor(t, 10*time.Second, n.Name()+" declares c dead", func() bool {
			m, ok := member(n.All(), "c")
			return ok && m.State == Dead
		})
	}
	c2 := start(t, "c", addr, []string{a.Addr()}, nil)
	c2.setMeta("meta-c2")
	for _, n := range []*tnode{a, b} {
		waitFor(t, 10*time.Second, n.Name()+" sees c alive again", func() bool {
			m, ok := member(n.Members(), "c")
			return ok && m.State == Alive && m.Addr == addr && n.rec.count(EventJoin, "c") == 2
		})
	}
	waitFor(t, 5*time.Second, "restarted c sees 3 members", func() bool { return len(c2.Members()) == 3 })
}

func TestRestartWithSameNameOnNewAddress(t *testing.T) {
	a, b, c := cluster3(t)
	old := c.Addr()
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*tnode{a, b} {
		waitFor(t, 10*time.Second, n.Name()+" declares c dead", func() bool {
			m, ok := member(n.All(), "c")
			return ok && m.State == Dead
		})
	}
	c2 := start(t, "c", "", []string{a.Addr()}, nil) // new port
	if c2.Addr() == old {
		t.Fatalf("restarted on the old address %s", old)
	}
	for _, n := range []*tnode{a, b} {
		// Usually within a gossip round; a dead notice for the old
		// incarnation still in flight can flap it once until c refutes.
		waitFor(t, 10*time.Second, n.Name()+" sees c alive at its new address", func() bool {
			m, ok := member(n.Members(), "c")
			return ok && m.Addr == c2.Addr()
		})
	}
}

// closedPort returns a 127.0.0.1 address nothing listens on (just released).
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestStartWithUnreachableSeedThenJoin(t *testing.T) {
	dead := closedPort(t)
	b := start(t, "b", "", []string{dead}, nil)
	if got := names(b.Members()); got != "b/alive" {
		t.Fatalf("members %s, want b alone", got)
	}
	k, err := b.Join([]string{dead})
	if k != 0 || !errors.Is(err, ErrNoSeedReachable) {
		t.Fatalf("Join(closed port) = %d, %v; want 0, ErrNoSeedReachable", k, err)
	}
	a := start(t, "a", "", nil, nil)
	k, err = b.Join([]string{a.Addr()})
	if k != 1 || err != nil {
		t.Fatalf("Join(a) = %d, %v", k, err)
	}
	for _, n := range []*tnode{a, b} {
		waitFor(t, 5*time.Second, n.Name()+" sees 2", func() bool { return len(n.Members()) == 2 })
	}
}

func TestStartWithOneReachableSeed(t *testing.T) {
	a := start(t, "a", "", nil, nil)
	b := start(t, "b", "", []string{a.Addr(), "127.0.0.1:1"}, nil)
	for _, n := range []*tnode{a, b} {
		waitFor(t, 5*time.Second, n.Name()+" sees 2", func() bool { return len(n.Members()) == 2 })
	}
}

func TestBackgroundJoinerReachesLateSeed(t *testing.T) {
	seed := closedPort(t)
	b := start(t, "b", "", []string{seed}, func(c *Config) { c.JoinRetry = 50 * time.Millisecond })
	if len(b.Members()) != 1 {
		t.Fatalf("members %s before the seed exists", names(b.Members()))
	}
	// The seed comes up later at the address b keeps retrying.
	a := start(t, "a", seed, nil, nil)
	for _, n := range []*tnode{a, b} {
		waitFor(t, 5*time.Second, n.Name()+" sees 2", func() bool { return len(n.Members()) == 2 })
	}
	// Shutdown stops the joiner (it has exited already here) and returns.
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

// Seed lists are usually shared, so a node's seeds name itself: reaching
// itself must not count as having joined.
func TestBackgroundJoinerIgnoresSelfInSeeds(t *testing.T) {
	self, other := closedPort(t), closedPort(t)
	a := start(t, "a", self, []string{self, other}, func(c *Config) { c.JoinRetry = 50 * time.Millisecond })
	b := start(t, "b", other, nil, nil) // knows no seeds: only a's joiner can connect them
	for _, n := range []*tnode{a, b} {
		waitFor(t, 5*time.Second, n.Name()+" sees 2", func() bool { return len(n.Members()) == 2 })
	}
}

func TestShutdownStopsBackgroundJoiner(t *testing.T) {
	b := start(t, "b", "", []string{closedPort(t)}, func(c *Config) { c.JoinRetry = 20 * time.Millisecond })
	done := make(chan error, 1)
	go func() { done <- b.Shutdown() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not stop the background joiner")
	}
	select {
	case <-b.joinerDone:
	default:
		t.Fatal("joiner still running after Shutdown")
	}
}

func TestSecretSeparatesClusters(t *testing.T) {
	withSecret := func(s string) func(*Config) {
		return func(c *Config) { c.Secret = []byte(s) }
	}
	a := start(t, "a", "", nil, withSecret("s3cret"))
	b := start(t, "b", "", []string{a.Addr()}, withSecret("s3cret"))
	waitFor(t, 5*time.Second, "a and b see each other", func() bool {
		return len(a.Members()) == 2 && len(b.Members()) == 2
	})

	wrong := start(t, "wrong", "", nil, withSecret("other"))
	if k, err := wrong.Join([]string{a.Addr()}); k != 0 || !errors.Is(err, ErrNoSeedReachable) {
		t.Fatalf("Join with another secret = %d, %v; want 0, ErrNoSeedReachable", k, err)
	}
	plain := start(t, "plain", "", nil, nil)
	if k, err := plain.Join([]string{a.Addr()}); k != 0 || err == nil {
		t.Fatalf("Join without secret = %d, %v; want failure", k, err)
	}
	// A later correct join is a sync point: anything the failed joins had
	// gossiped would have reached a before it.
	d := start(t, "d", "", []string{b.Addr()}, withSecret("s3cret"))
	waitFor(t, 5*time.Second, "a sees d", func() bool { _, ok := member(a.Members(), "d"); return ok })
	if got := names(a.All()); got != "a/alive,b/alive,d/alive" {
		t.Fatalf("a knows %s", got)
	}
	if got := names(wrong.Members()); got != "wrong/alive" {
		t.Fatalf("wrong-secret node sees %s", got)
	}
	if got := names(plain.Members()); got != "plain/alive" {
		t.Fatalf("no-secret node sees %s", got)
	}
	_ = d
}

func TestMetaTooLarge(t *testing.T) {
	big := bytes.Repeat([]byte{'x'}, MetaMax+1)
	_, err := Start(Config{Name: "big", BindAddr: "127.0.0.1:0", Meta: func() []byte { return big }})
	if !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("Start with %d-byte meta: %v, want ErrMetaTooLarge", len(big), err)
	}

	a := start(t, "a", "", nil, nil)
	b := start(t, "b", "", []string{a.Addr()}, nil)
	waitFor(t, 5*time.Second, "a sees b", func() bool { return len(a.Members()) == 2 })

	a.setMeta(string(big))
	if err := a.UpdateMeta(time.Second); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("UpdateMeta with %d bytes: %v, want ErrMetaTooLarge", len(big), err)
	}
	if m, _ := member(a.Members(), "a"); string(m.Meta) != "meta-a" {
		t.Fatalf("meta after rejected update: %q", m.Meta)
	}

	exact := strings.Repeat("y", MetaMax)
	a.setMeta(exact)
	if err := a.UpdateMeta(2 * time.Second); err != nil {
		t.Fatalf("UpdateMeta with %d bytes: %v", MetaMax, err)
	}
	waitFor(t, 5*time.Second, "b sees the 512-byte meta", func() bool {
		m, ok := member(b.Members(), "a")
		return ok && string(m.Meta) == exact
	})
}

func TestConfigValidation(t *testing.T) {
	ok := Config{Name: "n", BindAddr: "127.0.0.1:0"}
	cases := []struct {
		name string
		mod  func(*Config)
	}{
		{"empty name", func(c *Config) { c.Name = "" }},
		{"long name", func(c *Config) { c.Name = strings.Repeat("n", NameMax+1) }},
		{"bind without port", func(c *Config) { c.BindAddr = "127.0.0.1" }},
		{"bind hostname", func(c *Config) { c.BindAddr = "localhost:0" }},
		{"bind port range", func(c *Config) { c.BindAddr = "127.0.0.1:70000" }},
		{"bind port text", func(c *Config) { c.BindAddr = "127.0.0.1:http" }},
		{"advertise port 0", func(c *Config) { c.AdvertiseAddr = "127.0.0.1:0" }},
		{"advertise hostname", func(c *Config) { c.AdvertiseAddr = "example.com:7946" }},
		{"negative probe interval", func(c *Config) { c.ProbeInterval = -time.Second }},
		{"negative probe timeout", func(c *Config) { c.ProbeTimeout = -time.Second }},
		{"negative gossip interval", func(c *Config) { c.GossipInterval = -time.Second }},
		{"negative join retry", func(c *Config) { c.JoinRetry = -time.Second }},
		{"negative suspicion", func(c *Config) { c.SuspicionMult = -1 }},
		{"timeout above interval", func(c *Config) { c.ProbeTimeout = time.Second }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.mod(&cfg)
			n, err := Start(cfg)
			if !errors.Is(err, ErrInvalidConfig) {
				if n != nil {
					n.Shutdown()
				}
				t.Fatalf("Start: %v, want ErrInvalidConfig", err)
			}
		})
	}
	// The longest valid name is accepted.
	cfg := ok
	cfg.Name = strings.Repeat("n", NameMax)
	n, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start with %d-byte name: %v", NameMax, err)
	}
	n.Shutdown()
}

func TestAdvertiseAddr(t *testing.T) {
	a := start(t, "a", "", nil, func(c *Config) { c.AdvertiseAddr = "127.0.0.1:7" })
	m, ok := member(a.Members(), "a")
	if !ok || m.Addr != "127.0.0.1:7" {
		t.Fatalf("self = %+v, want advertised 127.0.0.1:7", m)
	}
	if a.Addr() == "127.0.0.1:7" {
		t.Fatalf("Addr() = %s, want the bound address", a.Addr())
	}
}

func TestClosedNode(t *testing.T) {
	a := start(t, "a", "", nil, nil)
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := a.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if err := a.Leave(time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("Leave after Shutdown: %v", err)
	}
	if err := a.UpdateMeta(time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("UpdateMeta after Shutdown: %v", err)
	}
	if _, err := a.Join([]string{"127.0.0.1:1"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Join after Shutdown: %v", err)
	}
	if len(a.Members()) != 1 {
		t.Errorf("Members after Shutdown: %s", names(a.Members()))
	}
}

func TestLeaveAloneAndConcurrentShutdown(t *testing.T) {
	a := start(t, "a", "", nil, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 2 {
		wg.Add(2)
		go func() { defer wg.Done(); errs <- a.Leave(time.Second) }()
		go func() { defer wg.Done(); errs <- a.Shutdown() }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("unexpected error %v", err)
		}
	}
}

func TestReturnedMetaIsACopy(t *testing.T) {
	a := start(t, "a", "", nil, nil)
	ms := a.Members()
	ms[0].Meta[0] = 'X'
	if m, _ := member(a.All(), "a"); string(m.Meta) != "meta-a" {
		t.Fatalf("table modified through a returned slice: %q", m.Meta)
	}
}

// captureHandler records log messages.
type captureHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level != slog.LevelDebug {
		return nil
	}
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	return nil
}
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captureHandler) WithGroup(string) slog.Handler      { return h }

func TestMemberlistLogsGoToSlogAtDebug(t *testing.T) {
	h := &captureHandler{}
	a := start(t, "a", "", nil, func(c *Config) { c.Logger = slog.New(h) })
	start(t, "b", "", []string{a.Addr()}, nil) // a logs the incoming push/pull
	waitFor(t, 5*time.Second, "a memberlist debug line", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, m := range h.msgs {
			if strings.Contains(m, "memberlist:") && !strings.HasSuffix(m, "\n") {
				return true
			}
		}
		return false
	})
}

func TestStringers(t *testing.T) {
	for v, want := range map[State]string{Alive: "alive", Suspect: "suspect", Dead: "dead", Left: "left", 9: "State(9)"} {
		if v.String() != want {
			t.Errorf("%d: %q", v, v.String())
		}
	}
	for v, want := range map[EventKind]string{EventJoin: "join", EventLeave: "leave", EventUpdate: "update", 9: "EventKind(9)"} {
		if v.String() != want {
			t.Errorf("%d: %q", v, v.String())
		}
	}
}

// TestConcurrentUse drives every method from several goroutines at once (run
// under -race), with OnChange reading Members as Sluice's engine may.
func TestConcurrentUse(t *testing.T) {
	var seen atomic.Int64
	var a *Node
	var ready atomic.Bool
	a0 := start(t, "a", "", nil, func(c *Config) {
		c.OnChange = func(e Event) {
			if ready.Load() {
				seen.Add(int64(len(a.Members())))
			}
		}
	})
	a = a0.Node
	ready.Store(true)
	b := start(t, "b", "", []string{a.Addr()}, nil)
	waitFor(t, 5*time.Second, "a sees b", func() bool { return len(a.Members()) == 2 })

	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 8 {
				switch j % 4 {
				case 0:
					a0.setMeta(fmt.Sprintf("g%d-%d", i, j))
					if err := a.UpdateMeta(2 * time.Second); err != nil {
						t.Errorf("UpdateMeta: %v", err)
					}
				case 1:
					if _, err := a.Join([]string{b.Addr()}); err != nil {
						t.Errorf("Join: %v", err)
					}
				case 2:
					_ = a.All()
				case 3:
					_ = b.Members()
				}
			}
		}()
	}
	wg.Wait()
	waitFor(t, 5*time.Second, "b sees a's final meta", func() bool {
		ma, _ := member(a.Members(), "a")
		mb, ok := member(b.Members(), "a")
		return ok && bytes.Equal(ma.Meta, mb.Meta)
	})
	if seen.Load() == 0 {
		t.Fatal("OnChange never ran after ready")
	}
}
