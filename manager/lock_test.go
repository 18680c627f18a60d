package manager

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
)

// slowHost is a remote host whose Seal blocks until release is closed, as
// a node that stopped answering blocks a request for the RPC timeout.
type slowHost struct {
	*host.Host
	entered chan struct{} // closed when Seal is first called
	release chan struct{}
	once    sync.Once
}

func (h *slowHost) Seal(id, succ uint64, succHost string) (uint64, error) {
	h.once.Do(func() { close(h.entered) })
	select {
	case <-h.release:
	case <-time.After(2 * time.Second): // the RPC timeout
	}
	return h.Host.Seal(id, succ, succHost)
}

// twoNodes is a Cluster of this node ("m", hosting locally) and "slow",
// which hosts the channels named in onSlow.
type twoNodes struct {
	noCopies
	local  *host.Host
	slow   *slowHost
	onSlow map[string]bool
}

func (c twoNodes) HostOf(node string) role.Host {
	if node == "slow" {
		return c.slow
	}
	return c.local
}
func (c twoNodes) Choose(ch string, _ uint64, _ Load, _ []string) (string, bool) {
	if c.onSlow[ch] {
		return "slow", true
	}
	return "m", true
}
func (c twoNodes) ListAll(string) []role.Hosted { return nil }
func (c twoNodes) Notify(string, []string)      {}
func (c twoNodes) Managed(string) bool          { return true }
func (c twoNodes) Skew() time.Duration          { return time.Second }
func (c twoNodes) Quorate() bool                { return true }

// TestTick_SlowSealDoesNotBlockTheShard: while the lifecycle waits for a
// remote host's Seal (a node that does not answer blocks it for the RPC
// timeout), WriteGrant and Info of other channels of the same shard,
// existing or new, answer at once: Tick decides under the locks and Do
// calls the host with none held.
func TestTick_SlowSealDoesNotBlockTheShard(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	local := host.New("m", clock)
	slow := &slowHost{Host: host.New("slow", clock), entered: make(chan struct{}), release: make(chan struct{})}
	defer close(slow.release)
	m := New(Config{Node: "m", Host: local, NewID: local.NewID, Clock: clock,
		Limits: func(string) role.Limits {
			return role.Limits{Msgs: 100, Size: 1 << 20, Life: time.Second, TTL: time.Minute}
		}})
	const a = "remote"
	var same []string // channels in a's shard
	for i := 0; len(same) < 2; i++ {
		if ch := fmt.Sprintf("c%d", i); m.shard(ch) == m.shard(a) {
			same = append(same, ch)
		}
	}
	m.SetCluster(twoNodes{local: local, slow: slow, onSlow: map[string]bool{a: true}})
	if _, err := m.WriteGrant(a, 0); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(2 * time.Second) // a's lease is over
	mu.Unlock()
	existing := same[0]
	if _, err := m.WriteGrant(existing, 0); err != nil {
		t.Fatal(err)
	}
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		m.Do(m.Tick(clock()))
	}()
	<-slow.entered // the lifecycle now waits for the slow host
	answered := make(chan error, 1)
	go func() {
		if _, ok := m.Info(existing, false); !ok {
			answered <- fmt.Errorf("Info(%s) found nothing", existing)
			return
		}
		_, err := m.WriteGrant(same[1], 0) // a new channel: the shard's write lock
		answered <- err
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case <-ticked:
		t.Fatal("Info and WriteGrant of other channels of the shard waited for the slow host's Seal")
	}
	slow.release <- struct{}{}
	<-ticked
	info, _ := m.Info(a, false)
	if len(info.Streamlets) != 1 || !info.Streamlets[0].Closed {
		t.Fatalf("after the seal: %+v, want its streamlet closed", info)
	}
}

// hostingSlow is a remote host whose HostStreamlet blocks until release.
type hostingSlow struct {
	*host.Host
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *hostingSlow) HostStreamlet(g role.Grant) error {
	h.once.Do(func() { close(h.entered) })
	<-h.release
	return h.Host.HostStreamlet(g)
}

type slowHosting struct {
	noCopies
	local *host.Host
	slow  *hostingSlow
}

func (c slowHosting) HostOf(node string) role.Host {
	if node == "slow" {
		return c.slow
	}
	return c.local
}
func (c slowHosting) Choose(ch string, _ uint64, _ Load, _ []string) (string, bool) {
	if ch == "remote" {
		return "slow", true
	}
	return "m", true
}
func (c slowHosting) ListAll(string) []role.Hosted { return nil }
func (c slowHosting) Notify(string, []string)      {}
func (c slowHosting) Managed(string) bool          { return true }
func (c slowHosting) Skew() time.Duration          { return time.Second }
func (c slowHosting) Quorate() bool                { return true }

// TestWriteGrant_SlowHostDoesNotBlockTheShard: a WriteGrant waiting for a
// remote host to host its streamlet holds only its own channel: the
// lifecycle tick, Info of another channel of the shard and WriteGrant of
// a new one go on meanwhile (the tick skips the busy channel and takes no
// channel's lock under a shard's lock).
func TestWriteGrant_SlowHostDoesNotBlockTheShard(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	local := host.New("m", clock)
	slow := &hostingSlow{Host: host.New("slow", clock), entered: make(chan struct{}), release: make(chan struct{})}
	m := New(Config{Node: "m", Host: local, NewID: local.NewID, Clock: clock,
		Limits: func(string) role.Limits {
			return role.Limits{Msgs: 100, Size: 1 << 20, Life: time.Second, TTL: time.Minute}
		}})
	m.SetCluster(slowHosting{local: local, slow: slow})
	const a = "remote"
	var same []string
	for i := 0; len(same) < 2; i++ {
		if ch := fmt.Sprintf("c%d", i); m.shard(ch) == m.shard(a) {
			same = append(same, ch)
		}
	}
	if _, err := m.WriteGrant(same[0], 0); err != nil {
		t.Fatal(err)
	}
	granted := make(chan error, 1)
	go func() {
		_, err := m.WriteGrant(a, 0)
		granted <- err
	}()
	<-slow.entered // a's grant now waits for the slow host (a is opening)
	answered := make(chan error, 1)
	go func() {
		m.Do(m.Tick(clock()))
		if _, ok := m.Info(same[0], false); !ok {
			answered <- fmt.Errorf("Info(%s) found nothing", same[0])
			return
		}
		_, err := m.WriteGrant(same[1], 0)
		answered <- err
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case err := <-granted:
		t.Fatalf("the slow grant returned (%v) before the others answered", err)
	case <-time.After(2 * time.Second): // the RPC timeout the slow host would take
		t.Fatal("Tick, Info and WriteGrant of other channels of the shard waited for the slow host")
	}
	close(slow.release)
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
}

// gatedHost is a remote host whose HostStreamlet, once gated, blocks until
// release is closed or 10 s pass (timedOut is then set), as a node that
// stopped answering blocks a request.
type gatedHost struct {
	*host.Host
	gated    atomic.Bool
	entered  chan struct{}
	release  chan struct{}
	once     sync.Once
	timedOut atomic.Bool
}

func (h *gatedHost) HostStreamlet(g role.Grant) error {
	if h.gated.Load() {
		h.once.Do(func() { close(h.entered) })
		select {
		case <-h.release:
		case <-time.After(10 * time.Second):
			h.timedOut.Store(true)
		}
	}
	return h.Host.HostStreamlet(g)
}

type gatedHosting struct {
	noCopies
	local *host.Host
	gated *gatedHost
}

func (c gatedHosting) HostOf(node string) role.Host {
	if node == "gated" {
		return c.gated
	}
	return c.local
}
func (c gatedHosting) Choose(ch string, _ uint64, _ Load, _ []string) (string, bool) {
	if ch == "remote" {
		return "gated", true
	}
	return "m", true
}
func (c gatedHosting) ListAll(string) []role.Hosted { return nil }
func (c gatedHosting) Notify(string, []string)      {}
func (c gatedHosting) Managed(string) bool          { return true }
func (c gatedHosting) Skew() time.Duration          { return time.Second }
func (c gatedHosting) Quorate() bool                { return true }

// TestWriteGrant_OpeningHoldsNoLock: while a WriteGrant waits for a remote
// host to host the next streamlet of channel c (the first grant's
// streamlet refused a write), Info(c) answers at once (c's lock is not
// held across the host call), as do WriteGrant and Info of another
// channel of c's shard; a second WriteGrant of c waits for the first's
// outcome and gets the same streamlet (one streamlet opened, not two).
func TestWriteGrant_OpeningHoldsNoLock(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	local := host.New("m", clock)
	gh := &gatedHost{Host: host.New("gated", clock), entered: make(chan struct{}), release: make(chan struct{})}
	m := New(Config{Node: "m", Host: local, NewID: local.NewID, Clock: clock,
		Limits: func(string) role.Limits {
			return role.Limits{Msgs: 100, Size: 1 << 20, Life: time.Second, TTL: time.Minute}
		}})
	m.SetCluster(gatedHosting{local: local, gated: gh})
	const c = "remote"
	other := ""
	for i := 0; other == ""; i++ {
		if ch := fmt.Sprintf("c%d", i); m.shard(ch) == m.shard(c) {
			other = ch
		}
	}
	g1, err := m.WriteGrant(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteGrant(other, 0); err != nil {
		t.Fatal(err)
	}
	gh.gated.Store(true)
	type result struct {
		g   role.Grant
		err error
	}
	opened := make(chan result, 1)
	go func() {
		g, err := m.WriteGrant(c, g1.Streamlet) // g1 refused a write: seal it, open the next
		opened <- result{g, err}
	}()
	<-gh.entered // the grant now waits for the gated host to host c's next streamlet
	waited := make(chan result, 1)
	go func() {
		g, err := m.WriteGrant(c, g1.Streamlet)
		waited <- result{g, err}
	}()
	answered := make(chan error, 1)
	go func() {
		info, ok := m.Info(c, false)
		switch {
		case !ok:
			answered <- fmt.Errorf("Info(%s) found nothing", c)
			return
		case len(info.Streamlets) != 1 || !info.Streamlets[0].Closed:
			answered <- fmt.Errorf("Info(%s) while opening: %+v, want the first streamlet closed and no open one", c, info.Streamlets)
			return
		}
		if _, ok := m.Info(other, false); !ok {
			answered <- fmt.Errorf("Info(%s) found nothing", other)
			return
		}
		_, err := m.WriteGrant(other, 0)
		answered <- err
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
		if gh.timedOut.Load() {
			t.Fatalf("Info(%s) answered only after the host call ended", c)
		}
	case r := <-opened:
		t.Fatalf("the grant returned (%+v, %v) before Info(%s) answered: Info waited for the host call", r.g, r.err, c)
	}
	select {
	case r := <-waited:
		t.Fatalf("a second WriteGrant of %s returned (%+v, %v) while the first was opening", c, r.g, r.err)
	default:
	}
	close(gh.release)
	r1, r2 := <-opened, <-waited
	if r1.err != nil || r2.err != nil {
		t.Fatal(r1.err, r2.err)
	}
	if r1.g.Streamlet == g1.Streamlet || r2.g.Streamlet != r1.g.Streamlet || r1.g.First != r2.g.First {
		t.Fatalf("grants %+v and %+v after %+v: want one new streamlet for both", r1.g, r2.g, g1)
	}
	info, _ := m.Info(c, false)
	if len(info.Streamlets) != 2 || !info.Streamlets[0].Closed || info.Streamlets[1].ID != r1.g.Streamlet || info.Streamlets[1].Closed {
		t.Fatalf("after the opening: %+v", info.Streamlets)
	}
}
