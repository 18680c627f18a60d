//go:build faultsuite

package fault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client"
	"github.com/sluice-rtm/sluice/wire"
)

// payloadSize is the size of every published payload.
const payloadSize = 64

// publisher publishes with acknowledgements at a fixed rate, round robin
// over its channels, through one Conn to one node (which the SDK leaves
// for another when it fails). Every publish and its outcome is recorded.
type publisher struct {
	id   int
	conn *client.Conn
	mu   sync.Mutex
	log  []Publish
	wg   sync.WaitGroup // outstanding callbacks
}

// run publishes rate messages per second until ctx ends. A publish that
// cannot even be queued within 250 ms (the window is full while the node
// is unreachable) is recorded as refused: nothing was sent.
func (p *publisher) run(ctx context.Context, chans []string, rate int) {
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	perTick := float64(rate) * tick.Seconds()
	var owed float64
	k := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for owed += perTick; owed >= 1; owed-- {
			p.send(ctx, chans[k%len(chans)])
			k++
		}
	}
}

// send publishes one message to ch and records it; a publish that cannot
// even be queued within 250 ms is recorded as refused.
func (p *publisher) send(ctx context.Context, ch string) {
	p.mu.Lock()
	i := len(p.log)
	id := MsgID{p.id, i}
	p.log = append(p.log, Publish{Channel: ch, ID: id, Sent: time.Now()})
	p.mu.Unlock()
	p.wg.Add(1)
	qctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
	err := p.conn.PublishFunc(qctx, ch, Payload(ch, id, payloadSize), func(pos uint64, err error) {
		p.done(i, pos, err)
		p.wg.Done()
	})
	cancel()
	if err != nil {
		p.done(i, 0, fmt.Errorf("not sent: %w", err))
		p.wg.Done()
	}
}

// done records the outcome of publish i.
func (p *publisher) done(i int, pos uint64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := &p.log[i]
	e.Done = time.Now()
	switch {
	case err == nil:
		e.Outcome, e.Pos = Acked, pos
	case errors.Is(err, client.ErrUnknownOutcome):
		e.Outcome, e.Err = Unknown, err.Error()
	default:
		e.Outcome, e.Err = Refused, err.Error()
	}
}

// wait waits (bounded) for every outcome.
func (p *publisher) wait(d time.Duration) bool {
	ch := make(chan struct{})
	go func() { p.wg.Wait(); close(ch) }()
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func (p *publisher) publishes() []Publish {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Publish(nil), p.log...)
}

// subscription records every event of one live subscription.
type subscription struct {
	name    string
	channel string
	from    uint64
	sub     *client.Subscription
	mu      sync.Mutex
	events  []Event
	err     error // how it ended, if it did before the case did
}

func (s *subscription) run(ctx context.Context) {
	for {
		ev, err := s.sub.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.mu.Lock()
				s.err = err
				s.mu.Unlock()
			}
			return
		}
		e := Event{At: time.Now()}
		switch ev.Kind {
		case client.KindMessage:
			e.Kind, e.Pos, e.Payload = Message, ev.Position, ev.Payload
		case client.KindGap:
			e.Kind, e.From, e.To, e.Reason = Gap, ev.Gap.From, ev.Gap.To, ev.Gap.Reason.String()
		case client.KindEpochChanged:
			e.Kind, e.Pos = Epoch, ev.Position
		}
		s.mu.Lock()
		s.events = append(s.events, e)
		s.mu.Unlock()
	}
}

func (s *subscription) snapshot() (Sub, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Sub{Name: s.name, Channel: s.channel, From: s.from, Events: append([]Event(nil), s.events...)}, s.err
}

// dial connects to node n with fast reconnects: the seed is n only, and
// the SDK learns the other nodes from WELCOME.
func dial(ctx context.Context, t *testing.T, n *node, name string) *client.Conn {
	t.Helper()
	conn, err := client.Dial(ctx, n.client(), client.WithName(name), client.WithBackoff(100*time.Millisecond, time.Second),
		client.WithMaxPending(8192), client.WithDialTimeout(2*time.Second))
	if err != nil {
		t.Fatalf("dial %s: %v", n.name, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// warm publishes one message to each channel (creating it), retrying
// refusals while the cluster settles, and returns the first position a
// subscriber must expect on each, and the publishes it made (acknowledged,
// publisher 0, payloads as Payload makes them).
func warm(ctx context.Context, t *testing.T, conn *client.Conn, chans []string) (map[string]uint64, []Publish) {
	t.Helper()
	from := map[string]uint64{}
	var pubs []Publish
	for i, ch := range chans {
		for tries := 0; ; tries++ {
			p := Publish{Channel: ch, ID: MsgID{0, i}, Sent: time.Now()}
			pos, err := conn.Publish(ctx, ch, Payload(ch, p.ID, payloadSize))
			if err == nil {
				p.Outcome, p.Pos, p.Done = Acked, pos, time.Now()
				pubs = append(pubs, p)
				from[ch] = pos + 1
				break
			}
			var we *wire.Error
			if tries > 50 || !errors.As(err, &we) {
				t.Fatalf("warm-up publish to %s: %v", ch, err)
			}
			time.Sleep(100 * time.Millisecond) // the cluster is settling: retry
		}
	}
	return from, pubs
}

// longNumber matches what differs between errors of one kind (positions,
// the numbers in channel names).
var longNumber = regexp.MustCompile(`[0-9]+`)

// faultCase is one case of the suite.
type faultCase struct {
	name string
	// chans picks the channels (by their managers).
	chans func(t *testing.T, names []string) []string
	// pubs and subs are the indexes of the nodes the publishers and the
	// subscribers connect to.
	pubs, subs []int
	// fault applies the fault to the topology at the end of the warm
	// phase and returns when it is healed.
	fault func(tp *topo)
	// nonEvent: the fault must be invisible to subscribers (a drained
	// node's restart): no GAP of any kind and no epoch change either.
	nonEvent bool
	// flags are serve flags of this case's nodes, after serveFlags.
	flags []string
	// noLoss: no acknowledged message may be announced lost either (the
	// streamlets are replicated and fewer nodes than replicas died).
	noLoss bool
	// outcomeBound: every publish gets its outcome (acknowledged, refused
	// or unknown) within bound of being sent: the fault may delay
	// acknowledgements, not hold them until it heals.
	outcomeBound bool
	// needsNft: the fault drops packets with nftables (skipped without
	// nft).
	needsNft bool
	// replay: once publishing ended, subscribers on every node still
	// running replay every channel from its first position: they read
	// what the cluster still holds after the fault (a node without live
	// subscribers holds no copies of its own: it reads its replicas or the
	// surviving ones).
	replay bool
	// nodes is the size of the topology (0: three, a, b and c).
	nodes int
	// caps are the --cluster-capacity of nodes (by name) other than 1.
	caps map[string]float64
}

// Timing of every case. bound is the promise under test: every
// subscriber receives each acknowledged message, or a GAP covering it,
// within bound of the acknowledgement: the SDK's dead-connection
// detection (two unanswered PINGs: 2 to 3 ping intervals), the node link
// heartbeat (2 RPC timeouts) or membership failure detection (about 2 s),
// one RPC timeout, and a few seconds of slack for reconnecting and
// resolving again. A fault shorter than the detection adds at most its own
// length.
//
// By default the nodes run with a 1 s ping interval and RPC timeout and
// the bound is 12 s. SLUICE_FAULT_TIMING=defaults runs them with the
// server's defaults (5 s and 2 s) and the bound the README states for
// them, 20 s.
const (
	warmFor   = 3 * time.Second
	faultFor  = 8 * time.Second
	afterHeal = 6 * time.Second
	rate      = 100 // messages per second per publisher
	nchans    = 12
)

var (
	defaultTiming = os.Getenv("SLUICE_FAULT_TIMING") == "defaults"
	bound         = pick(defaultTiming, 20*time.Second, 12*time.Second)
	rpcTimeout    = pick(defaultTiming, 2*time.Second, time.Second) // a link fails after two of silence
	// logLevel is the nodes' (SLUICE_FAULT_LOG_LEVEL, default info; debug
	// logs every streamlet opened and lost).
	logLevel = pick(os.Getenv("SLUICE_FAULT_LOG_LEVEL") != "", os.Getenv("SLUICE_FAULT_LOG_LEVEL"), "info")
	// serveFlags are the flags of every node in the suite.
	serveFlags = append([]string{"--limit-msgs", "500", "--limit-life", "2s", "--ttl", "60s", "--log-level", logLevel},
		pick(defaultTiming, nil, []string{"--ping-interval", "1s", "--cluster-rpc-timeout", "1s"})...)
)

func runCase(t *testing.T, bin string, fc faultCase) Result {
	size := max(fc.nodes, 3)
	tp := newTopo(t, bin, size, append(append([]string(nil), serveFlags...), fc.flags...)...)
	tp.caps = fc.caps
	if serveSupports(bin, "bootstrap-expect")["bootstrap-expect"] {
		// Started together, as an operator starts a new cluster: its
		// first configuration has every node as a voter (up to five).
		tp.nodeFlags = func(*node) []string { return []string{"--bootstrap-expect", strconv.Itoa(size)} }
	}
	for _, n := range tp.nodes {
		tp.start(n)
	}
	tp.waitAlive(size, 30*time.Second, tp.nodes...)
	chans := fc.chans(t, tp.names())
	tp.chans, tp.pubs, tp.subs = chans, fc.pubs, fc.subs

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	from, _ := warm(ctx, t, dial(ctx, t, tp.nodes[fc.pubs[0]], "warm"), chans)

	subCtx, stopSubs := context.WithCancel(ctx)
	defer stopSubs()
	var subs []*subscription
	var swg sync.WaitGroup
	for _, i := range fc.subs {
		n := tp.nodes[i]
		conn := dial(ctx, t, n, "sub-"+n.name)
		for _, ch := range chans {
			sub, err := conn.Subscribe(ctx, ch, client.FromPosition(from[ch]), client.WithBuffer(16384))
			if err != nil {
				t.Fatalf("subscribe on %s to %s: %v", n.name, ch, err)
			}
			s := &subscription{name: "sub@" + n.name + "/" + ch, channel: ch, from: from[ch], sub: sub}
			subs = append(subs, s)
			swg.Add(1)
			go func() { defer swg.Done(); s.run(subCtx) }()
		}
	}
	pubCtx, stopPubs := context.WithCancel(ctx)
	defer stopPubs()
	var pubs []*publisher
	var pwg sync.WaitGroup
	for k, i := range fc.pubs {
		p := &publisher{id: k + 1, conn: dial(ctx, t, tp.nodes[i], fmt.Sprintf("pub%d-%s", k+1, tp.nodes[i].name))}
		pubs = append(pubs, p)
		pwg.Add(1)
		go func() { defer pwg.Done(); p.run(pubCtx, chans, rate) }()
	}

	phase := func(d time.Duration) {
		select {
		case <-time.After(d): // the case's schedule, not a synchronisation
		case <-ctx.Done():
			t.Fatal("case timed out")
		}
	}
	phase(warmFor)
	t0 := time.Now()
	fc.fault(tp)
	t.Logf("fault applied and healed in %v", time.Since(t0).Round(time.Millisecond))
	phase(afterHeal)
	stopPubs()
	pwg.Wait()
	for _, p := range pubs {
		if !p.wait(bound) {
			t.Errorf("publisher %d: outcomes still missing %v after the end", p.id, bound)
		}
	}
	var all []Publish
	lastAck := time.Time{}
	for k, p := range pubs {
		var n [4]int // by Outcome
		for _, e := range p.publishes() {
			all = append(all, e)
			n[e.Outcome]++
			if e.Outcome == Acked && e.Done.After(lastAck) {
				lastAck = e.Done
			}
		}
		t.Logf("publisher %d (on %s): acked %d, refused %d, unknown %d, pending %d", p.id, tp.nodes[fc.pubs[k]].name,
			n[Acked], n[Refused], n[Unknown], n[Pending])
	}
	// Wait until every subscriber has covered every ack, or the bound
	// after the last ack has passed.
	var res Result
	for {
		snaps := make([]Sub, 0, len(subs))
		for _, s := range subs {
			sn, _ := s.snapshot()
			snaps = append(snaps, sn)
		}
		res = Account(all, snaps, bound)
		if res.Silent == 0 || time.Now().After(lastAck.Add(bound+time.Second)) {
			break
		}
		phase(250 * time.Millisecond)
	}
	stopSubs()
	swg.Wait()
	for _, s := range subs {
		if _, err := s.snapshot(); err != nil {
			t.Errorf("%s ended: %v", s.name, err)
		}
	}
	t.Logf("%s: %v", fc.name, res)
	var slowest time.Duration
	slow := 0
	for _, e := range all {
		if !e.Done.IsZero() {
			w := e.Done.Sub(e.Sent)
			slowest = max(slowest, w)
			if w > bound {
				slow++
			}
		}
	}
	t.Logf("%s: longest wait for a publish's outcome %v; %d over the bound %v", fc.name, slowest.Round(time.Millisecond), slow, bound)
	if fc.outcomeBound && slow > 0 {
		t.Errorf("%s: %d publishes got their outcome more than %v after they were sent (longest %v)", fc.name, slow, bound,
			slowest.Round(time.Millisecond))
	}
	if fc.replay {
		on := tp.running()
		late := replay(ctx, t, tp, on, chans, from, all)
		t.Logf("%s, replayed after the fault on %v: %v", fc.name, tp.nameList(on), late)
		if !late.OK() || (fc.noLoss && late.Announced > 0) {
			for _, ex := range late.Examples {
				t.Logf("  %s", ex)
			}
			t.Errorf("%s, replayed: %d acknowledged messages announced lost, silent %d, duplicates %d, out of order %d, mismatch %d",
				fc.name, late.Announced, late.Silent, late.Duplicates, late.OutOfOrder, late.Mismatch)
		}
	}
	if !res.OK() {
		for _, ex := range res.Examples {
			t.Logf("  %s", ex)
		}
		probeSilent(ctx, t, tp, all, subs)
		t.Errorf("%s: silent %d, late %d, duplicates %d, out of order %d, mismatch %d, double acks %d, refused yet delivered %d",
			fc.name, res.Silent, res.Late, res.Duplicates, res.OutOfOrder, res.Mismatch, res.DoubleAcks, res.RefusedDelivered)
	}
	if res.Delivered == 0 {
		t.Errorf("%s: nothing delivered", fc.name)
	}
	if fc.noLoss && res.Announced > 0 {
		for _, line := range gapsOverAcks(all, subSnaps(subs), 8) {
			t.Logf("  %s", line)
		}
		t.Errorf("%s: %d acknowledged messages announced lost, want none", fc.name, res.Announced)
	}
	if fc.nonEvent || fc.outcomeBound {
		why := map[string]int{}
		for _, e := range all {
			if e.Outcome != Acked {
				why[longNumber.ReplaceAllString(e.Err, "N")]++ // positions and names of channels apart
			}
		}
		for text, n := range why {
			t.Logf("  %d not acknowledged: %s", n, text)
		}
	}
	if fc.nonEvent {
		gaps := 0
		for _, s := range subs {
			sn, _ := s.snapshot()
			for _, e := range sn.Events {
				if e.Kind == Gap {
					if gaps++; gaps <= 5 {
						t.Logf("  %s: GAP [%d, %d]", sn.Name, e.From, e.To)
					}
				}
			}
		}
		if gaps > 0 || res.Announced > 0 || res.Epochs > 0 {
			t.Errorf("%s: %d GAPs (%d acknowledged messages announced lost) and %d epoch changes, want none", fc.name,
				gaps, res.Announced, res.Epochs)
		}
	}
	return res
}

// replay subscribes on the given nodes (indexes) to every channel from its first
// position, once publishing has ended, reads until each subscription has
// passed the last acknowledged position of its channel (or a minute
// passed), and accounts the result with no latency bound (the readers
// join late on purpose).
func replay(ctx context.Context, t *testing.T, tp *topo, nodes []int, chans []string, from map[string]uint64, all []Publish) Result {
	t.Helper()
	return Account(all, replaySubs(ctx, t, tp, nodes, chans, from, all), time.Hour)
}

// replaySubs subscribes on the given nodes (indexes) to every channel from
// from[ch] (from earliest when from is nil), reads until each subscription
// has passed the last acknowledged position of its channel (or a minute
// passed), and returns what each received.
func replaySubs(ctx context.Context, t *testing.T, tp *topo, nodes []int, chans []string, from map[string]uint64, all []Publish) []Sub {
	t.Helper()
	last := map[string]uint64{}
	for _, p := range all {
		if p.Outcome == Acked && p.Pos > last[p.Channel] {
			last[p.Channel] = p.Pos
		}
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var subs []*subscription
	var wg sync.WaitGroup
	for _, i := range nodes {
		n := tp.nodes[i]
		conn := dial(ctx, t, n, "replay-"+n.name)
		for _, ch := range chans {
			start := client.FromEarliest()
			if from != nil {
				start = client.FromPosition(from[ch])
			}
			sub, err := conn.Subscribe(ctx, ch, start, client.WithBuffer(16384))
			if err != nil {
				t.Fatalf("replay on %s of %s: %v", n.name, ch, err)
			}
			s := &subscription{name: "replay@" + n.name + "/" + ch, channel: ch, from: from[ch], sub: sub}
			subs = append(subs, s)
			wg.Add(1)
			go func() { defer wg.Done(); s.run(rctx) }()
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		done := true
		for _, s := range subs {
			sn, _ := s.snapshot()
			reached := uint64(0)
			if k := len(sn.Events); k > 0 {
				e := sn.Events[k-1]
				reached = max(e.Pos, e.To)
			}
			if reached < last[s.channel] {
				done = false
			}
		}
		if done || time.Now().After(deadline) {
			break
		}
		select {
		case <-time.After(100 * time.Millisecond): // polling the subscribers' progress
		case <-ctx.Done():
			t.Fatal("case timed out")
		}
	}
	stop()
	wg.Wait()
	return subSnaps(subs)
}

// probeSilent is a diagnosis for a failed case: for the first silent
// position of each subscription that has one, a fresh subscription from
// there on every node says whether the message can be read at all (a
// stuck reader) or not (lost or never reachable).
func probeSilent(ctx context.Context, t *testing.T, tp *topo, all []Publish, subs []*subscription) {
	done := map[string]bool{}
	for _, s := range subs {
		sn, _ := s.snapshot()
		r := Account(all, []Sub{sn}, bound)
		if r.Silent == 0 || done[s.channel] {
			continue
		}
		done[s.channel] = true
		var first uint64
		for _, p := range all {
			if p.Channel == s.channel && p.Outcome == Acked && p.Pos >= s.from && (first == 0 || p.Pos < first) {
				covered := false
				for _, ev := range sn.Events {
					covered = covered || (ev.Kind == Message && ev.Pos == p.Pos) || (ev.Kind == Gap && ev.From <= p.Pos && p.Pos <= ev.To)
				}
				if !covered {
					first = p.Pos
				}
			}
		}
		probeFrom(ctx, t, tp, s.channel, first)
	}
}

// probeFrom subscribes to channel from position first on every node with
// a fresh connection for 3 s and logs what each node answered and
// delivered: whether the messages can be read at all (a stuck reader) or
// not (lost or never reachable).
func probeFrom(ctx context.Context, t *testing.T, tp *topo, channel string, first uint64) {
	for _, n := range tp.nodes {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		conn, err := client.Dial(pctx, n.client(), client.WithReconnect(false))
		if err != nil {
			t.Logf("probe %s on %s: %v", channel, n.name, err)
			cancel()
			continue
		}
		sub, err := conn.Subscribe(pctx, channel, client.FromPosition(first))
		msgs, gaps, last := 0, 0, uint64(0)
		for err == nil {
			var ev client.Event
			if ev, err = sub.Next(pctx); err == nil {
				if ev.Kind == client.KindMessage {
					msgs, last = msgs+1, ev.Position
				} else if ev.Kind == client.KindGap {
					gaps, last = gaps+1, ev.Gap.To
				}
			}
		}
		var info client.SubInfo
		if sub != nil {
			info = sub.Info()
		}
		t.Logf("probe %s on %s from %d: SUBSCRIBED first %d earliest %d next %d epoch %d; %d messages, %d gaps, up to %d, then %v",
			channel, n.name, first, info.First, info.Earliest, info.Next, info.Epoch, msgs, gaps, last, err)
		conn.Close()
		cancel()
	}
}

// gapsOverAcks describes up to n gaps that subscribers got over
// acknowledged positions: who, when, the range, how many acks it covers.
func gapsOverAcks(all []Publish, snaps []Sub, n int) []string {
	acked := map[string][]uint64{}
	for _, e := range all {
		if e.Outcome == Acked {
			acked[e.Channel] = append(acked[e.Channel], e.Pos)
		}
	}
	var out []string
	for _, sn := range snaps {
		for _, ev := range sn.Events {
			if ev.Kind != Gap {
				continue
			}
			k := 0
			for _, p := range acked[sn.Channel] {
				if p >= ev.From && p <= ev.To {
					k++
				}
			}
			if k > 0 && len(out) < n {
				out = append(out, fmt.Sprintf("%s: GAP %d..%d at %s covers %d acknowledged", sn.Name, ev.From, ev.To,
					ev.At.Format("15:04:05.000"), k))
			}
		}
	}
	return out
}

// subSnaps returns the snapshots of subs.
func subSnaps(subs []*subscription) []Sub {
	snaps := make([]Sub, 0, len(subs))
	for _, s := range subs {
		sn, _ := s.snapshot()
		snaps = append(snaps, sn)
	}
	return snaps
}
