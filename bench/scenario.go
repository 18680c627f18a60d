package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Scenario describes one workload.
type Scenario struct {
	// Name is the command-line name.
	Name string
	// Summary is one line for help texts.
	Summary string
	// Durable says the scenario needs acknowledged, stored messages (a
	// peer runs it on its persistent flavour, e.g. NATS JetStream).
	Durable bool
	// Defaults fills the scenario's shape (publishers, subscribers, ...)
	// into a Config whose fields are zero.
	Defaults func(c *Config)
	run      func(ctx context.Context, d Driver, c Config, r *Result) error
}

// Scenarios lists every scenario, in the order reports show them.
var Scenarios = []Scenario{
	{Name: "pub", Summary: "publish only: publishers, no subscriber", run: runThroughput,
		Defaults: func(c *Config) { setDefaults(c, 1, 0, 1) }},
	{Name: "pubsub", Summary: "1:1: one publisher, one subscriber, one channel", run: runThroughput,
		Defaults: func(c *Config) { setDefaults(c, 1, 1, 1) }},
	{Name: "fanout", Summary: "1:N fan-out: one publisher, --subs subscribers (10, 100, 1000) on one channel", run: runThroughput,
		Defaults: func(c *Config) { setDefaults(c, 1, 10, 1) }},
	{Name: "nm", Summary: "N:M: --pubs publishers and --subs subscribers over --channels channels", run: runThroughput,
		Defaults: func(c *Config) { setDefaults(c, 4, 4, 64) }},
	{Name: "ack-sync", Summary: "acknowledged publish, one at a time (round-trip bound)", Durable: true, run: runAckSync,
		Defaults: func(c *Config) { setDefaults(c, 1, 0, 1) }},
	{Name: "ack-async", Summary: "acknowledged publish, pipelined (--window in flight)", Durable: true, run: runAckAsync,
		Defaults: func(c *Config) { setDefaults(c, 1, 0, 1) }},
	{Name: "latency", Summary: "1:1 latency at a fixed --rate, open loop (p50, p99, p99.9, max); --subs N measures 1:N", run: runLatency,
		Defaults: func(c *Config) { setDefaults(c, 1, 1, 1) }},
	{Name: "replay", Summary: "read --count retained messages from the earliest", Durable: true, run: runReplay,
		Defaults: func(c *Config) { setDefaults(c, 1, 1, 1) }},
	{Name: "idle", Summary: "--conns idle connections: server memory per connection", run: runIdle,
		Defaults: func(c *Config) { setDefaults(c, 0, 0, 0) }},
}

// Lookup returns the scenario named name.
func Lookup(name string) (Scenario, error) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, nil
		}
	}
	names := make([]string, len(Scenarios))
	for i, s := range Scenarios {
		names[i] = s.Name
	}
	return Scenario{}, fmt.Errorf("%w %q (one of: %s)", ErrUnknownScenario, name, strings.Join(names, ", "))
}

func setDefaults(c *Config, pubs, subs, channels int) {
	if c.Pubs == 0 {
		c.Pubs = pubs
	}
	if c.Subs == 0 {
		c.Subs = subs
	}
	if c.Channels == 0 {
		c.Channels = channels
	}
}

// Sizes are the standard message sizes of the suite.
var Sizes = []int{16, 128, 1024, 16384}

// Config is one run's parameters. Zero fields take the scenario's defaults
// (see Normalize).
type Config struct {
	Size     int     `json:"size"`               // payload bytes
	Count    int     `json:"count,omitempty"`    // messages per publisher (replay: retained messages)
	Pubs     int     `json:"pubs,omitempty"`     // publisher connections
	Subs     int     `json:"subs,omitempty"`     // subscriber connections
	Channels int     `json:"channels,omitempty"` // channels
	Rate     float64 `json:"rate,omitempty"`     // latency: messages per second
	// Pacer: latency: how the publisher waits for its next due time.
	Pacer PacerMode `json:"pacer"`
	// Busy asks the harness to run a CPU load beside the run (one busy
	// thread per core at nice 0, in a process of its own); package bench
	// only records it, the caller starts the load (see RunBusy).
	Busy bool `json:"busy,omitempty"`
	// Duration: latency: how long to publish; other scenarios: an upper
	// bound on the publishing phase (Count is cut short when it is reached).
	Duration time.Duration `json:"duration_ns,omitempty"`
	Window   int           `json:"window,omitempty"` // ack-async: publishes in flight
	Conns    int           `json:"conns,omitempty"`  // idle: connections
	// Live: throughput scenarios with subscribers: the publishers stay at
	// most Live messages ahead of the subscribers (flow.go); 0 publishes
	// as fast as the system takes messages (overload).
	Live int `json:"live,omitempty"`
	// OverMark: bytes of backlog per subscriber past which a throughput
	// run counts as overloaded (Result.Overload); 0 does not time it.
	OverMark int `json:"over_mark,omitempty"`
	// Warmup: latency: deliveries of messages due in the first Warmup of
	// the schedule are not recorded.
	Warmup time.Duration `json:"warmup_ns,omitempty"`
	// Stall ends the wait for deliveries when no message arrived for this
	// long (default 3 s); the run is then reported incomplete.
	Stall time.Duration `json:"-"`
	// Prefix is prepended to channel names so that runs do not see each
	// other's retained messages (default: a per-run unique prefix).
	Prefix string `json:"-"`
	// Progress, if not nil, counts the run's operations.
	Progress *Progress `json:"-"`
	// Server, if not nil, is read before and after the measured phase for
	// server CPU time and memory.
	Server *ProcStat `json:"-"`
}

// CountFor is the default messages per publisher for payloads of size
// bytes: 1M up to 128 B, 500k up to 1 KiB, 60k above (about 128 MB, 512 MB
// and 1 GB of payload): long enough that a server's buffers, a slow
// consumer's backlog and retention are all exercised, as in the
// independent measurements of issue 16.
func CountFor(size int) int {
	switch {
	case size <= 128:
		return 1_000_000
	case size <= 1024:
		return 500_000
	}
	return 60_000
}

// Quick returns the configuration of --quick runs: the suite's counts and
// durations (CountFor: runs shorter than that hid loss) but 1000 idle
// connections; the quick suite is shorter by having fewer scenarios.
func Quick(c Config) Config {
	if c.Conns == 0 {
		c.Conns = 1000
	}
	return c
}

var runSeq atomic.Uint64

// Normalize applies sc's defaults and the suite's defaults to c and checks
// it.
func (sc Scenario) Normalize(c Config) (Config, error) {
	sc.Defaults(&c)
	if c.Size == 0 {
		c.Size = 128
	}
	if c.Count == 0 {
		c.Count = CountFor(c.Size)
	}
	if c.Rate == 0 {
		c.Rate = 50_000
	}
	if c.Duration == 0 {
		if sc.Name == "latency" {
			c.Duration = 10 * time.Second
		} else {
			c.Duration = 2 * time.Minute
		}
	}
	if c.Window == 0 {
		c.Window = 1000
	}
	if c.Conns == 0 {
		c.Conns = 10_000
	}
	if c.Stall == 0 {
		c.Stall = 3 * time.Second
	}
	if c.Prefix == "" {
		c.Prefix = fmt.Sprintf("bench.%d.%d", time.Now().UnixNano()%1_000_000_007, runSeq.Add(1))
	}
	switch {
	case c.Size < 0 || c.Size > 16<<20:
		return c, fmt.Errorf("%w: size %d (0..16 MiB)", ErrConfig, c.Size)
	case sc.Name == "latency" && c.Size < 8:
		return c, fmt.Errorf("%w: latency needs size >= 8 (the send time travels in the payload)", ErrConfig)
	case c.Count < 1, c.Pubs < 0, c.Subs < 0, c.Channels < 0, c.Window < 1, c.Conns < 1:
		return c, fmt.Errorf("%w: count, window and conns must be >= 1; pubs, subs, channels >= 0", ErrConfig)
	case c.Pubs > 10_000 || c.Subs > 100_000 || c.Channels > 1_000_000 || c.Conns > 1_000_000:
		return c, fmt.Errorf("%w: pubs <= 10000, subs <= 100000, channels <= 1e6, conns <= 1e6", ErrConfig)
	case c.Rate <= 0 || c.Duration <= 0:
		return c, fmt.Errorf("%w: rate and duration must be positive", ErrConfig)
	case sc.Name != "idle" && (c.Pubs < 1 || c.Channels < 1):
		return c, fmt.Errorf("%w: %s needs pubs >= 1 and channels >= 1", ErrConfig, sc.Name)
	}
	return c, nil
}

// Run runs scenario name against d with c (normalized first) and returns
// its Result. ctx bounds the whole run. A run that measured something but
// did not complete returns its Result together with an error matching
// ErrIncomplete. Run may be called by one goroutine at a time per Progress.
func Run(ctx context.Context, d Driver, name string, c Config) (Result, error) {
	sc, err := Lookup(name)
	if err != nil {
		return Result{}, err
	}
	c, err = sc.Normalize(c)
	if err != nil {
		return Result{}, err
	}
	r := Result{System: d.Name(), Scenario: name, Config: c, Started: time.Now()}
	r.Load1[0] = LoadAvg()
	err = sc.run(ctx, d, c, &r)
	r.Load1[1] = LoadAvg()
	return r, err
}

// serverMeter measures the server process over the timed phase.
type serverMeter struct {
	ps  *ProcStat
	cpu time.Duration
}

func startMeter(ps *ProcStat) serverMeter {
	m := serverMeter{ps: ps}
	if ps != nil {
		m.cpu, _ = ps.CPU()
	}
	return m
}

// stop fills r's server fields; msgs is the number of messages the CPU time
// is divided by.
func (m serverMeter) stop(r *Result, msgs int64) {
	if m.ps == nil {
		return
	}
	cpu, err := m.ps.CPU()
	if err != nil {
		return
	}
	r.ServerCPU = cpu - m.cpu
	r.CPUSource = m.ps.Source()
	if msgs > 0 {
		r.CPUPerMsgNs = float64(r.ServerCPU) / float64(msgs)
	}
	if rss, err := m.ps.RSS(); err == nil {
		r.ServerRSS = rss
	}
}

// connectAll opens n clients, at most 64 dials at a time.
func connectAll(ctx context.Context, d Driver, n int, prog *Progress) ([]Client, error) {
	cs := make([]Client, n)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range cs {
		sem <- struct{}{}
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := d.Connect(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("connection %d: %w", i, err)
				}
				return
			}
			cs[i] = c
			prog.add(1)
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	if first != nil {
		closeAll(cs)
		return nil, first
	}
	return cs, nil
}

func closeAll(cs []Client) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, c := range cs {
		if c == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			_ = c.Close()
			<-sem
		}()
	}
	wg.Wait()
}

// counter counts one subscriber's messages; complete is set (with the time)
// when it reaches want.
type counter struct {
	n    atomic.Int64
	want atomic.Int64
	at   atomic.Int64 // unix nanos of completion, 0 before
	prog *Progress
}

func (c *counter) handle([]byte) {
	n := c.n.Add(1)
	if n&1023 == 0 {
		c.prog.add(1024)
	}
	if n == c.want.Load() {
		c.at.Store(time.Now().UnixNano())
	}
}

func newCounter(want int64, prog *Progress) *counter {
	c := &counter{prog: prog}
	c.want.Store(want)
	return c
}

// payload returns a size-byte message body.
func payload(size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	return p
}

// runThroughput is pub, pubsub, fanout and nm: c.Pubs publishers spread
// c.Count messages each round-robin over c.Channels channels; c.Subs
// subscribers each take a share of the channels (or share a channel when
// there are more subscribers than channels). Publish rate is measured until
// every publisher's Flush returns; delivery rate until the last expected
// message arrives (or deliveries stall).
func runThroughput(ctx context.Context, d Driver, c Config, r *Result) error {
	chName := func(i int) string { return fmt.Sprintf("%s.c%d", c.Prefix, i) }
	// subscriber j listens to channels {k : k % Subs == j} if Channels >=
	// Subs, else to channel j % Channels.
	subsOf := make([]int64, c.Channels)
	chansOf := make([][]int, c.Subs)
	for j := range chansOf {
		if c.Channels >= c.Subs {
			for k := j; k < c.Channels; k += c.Subs {
				chansOf[j] = append(chansOf[j], k)
			}
		} else {
			chansOf[j] = []int{j % c.Channels}
		}
		for _, k := range chansOf[j] {
			subsOf[k]++
		}
	}
	// Messages per channel when publisher i has sent sent[i] messages; its
	// message m goes to channel (i+m) % Channels.
	perChan := func(sent []int64) []int64 {
		pc := make([]int64, c.Channels)
		for i, n := range sent {
			full, rest := n/int64(c.Channels), n%int64(c.Channels)
			for k := int64(0); k < int64(c.Channels); k++ {
				pc[(int64(i)+k)%int64(c.Channels)] += full
				if k < rest {
					pc[(int64(i)+k)%int64(c.Channels)]++
				}
			}
		}
		return pc
	}
	// wants returns each subscriber's expected deliveries and their sum.
	wants := func(pc []int64) ([]int64, int64) {
		ws := make([]int64, c.Subs)
		var sum int64
		for j := range ws {
			for _, k := range chansOf[j] {
				ws[j] += pc[k]
			}
			sum += ws[j]
		}
		return ws, sum
	}
	planned := make([]int64, c.Pubs)
	for i := range planned {
		planned[i] = int64(c.Count)
	}
	subWants, expected := wants(perChan(planned))
	c.Progress.reset("connect", int64(c.Subs+c.Pubs))
	subConns, err := connectAll(ctx, d, c.Subs, c.Progress)
	if err != nil {
		return err
	}
	defer closeAll(subConns)
	counters := make([]*counter, c.Subs)
	for j := range subConns {
		counters[j] = newCounter(subWants[j], c.Progress)
	}
	subs := make([]Sub, 0, c.Subs)
	for j, sc := range subConns {
		for _, k := range chansOf[j] {
			s, err := sc.Subscribe(ctx, chName(k), StartLive, counters[j].handle)
			if err != nil {
				return fmt.Errorf("subscribe %d: %w", j, err)
			}
			subs = append(subs, s)
		}
	}
	pubConns, err := connectAll(ctx, d, c.Pubs, c.Progress)
	if err != nil {
		return err
	}
	defer closeAll(pubConns)
	names := make([]string, c.Channels)
	for k := range names {
		names[k] = chName(k)
	}
	body := payload(c.Size)
	total := int64(c.Pubs) * int64(c.Count)
	if c.Subs > 0 {
		c.Progress.reset("deliver", expected)
	} else {
		c.Progress.reset("publish", total)
	}
	flow := newFlowMonitor(c, counters, expected, total)
	step := int64(64) // publishes counted into flow at a time
	if c.Live > 0 {
		step = min(step, max(int64(c.Live)/8, 1))
	}
	meter := startMeter(c.Server)
	pctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	flow.start()
	flowStopped := false
	defer func() {
		if !flowStopped {
			flow.stop()
		}
	}()
	start := time.Now()
	sent := make([]int64, c.Pubs) // written by publisher i, read after errs
	errs := make(chan error, c.Pubs)
	for i, pc := range pubConns {
		go func() {
			var n int64
			var err error
			for m := 0; m < c.Count; m++ {
				if m&1023 == 1023 && pctx.Err() != nil {
					break // Duration reached
				}
				if n%step == 0 && !flow.wait(pctx) {
					break // Duration reached
				}
				if err = pc.Publish(pctx, names[(i+m)%c.Channels], body); err != nil {
					break
				}
				n++
				if n%step == 0 {
					flow.published.Add(step)
				}
				if c.Subs == 0 && n&1023 == 0 {
					c.Progress.add(1024)
				}
			}
			flow.published.Add(n % step)
			if ferr := pc.Flush(ctx); err == nil {
				err = ferr
			}
			sent[i] = n
			errs <- err
		}()
	}
	var pubErr error
	for range pubConns {
		if err := <-errs; err != nil && pubErr == nil && !errors.Is(err, context.DeadlineExceeded) {
			pubErr = err
		}
	}
	r.Elapsed = time.Since(start)
	for _, n := range sent {
		r.Published += n
	}
	r.setPubRate(c.Size)
	if pubErr != nil {
		return fmt.Errorf("publish: %w", pubErr)
	}
	if c.Subs == 0 {
		meter.stop(r, r.Published)
		return nil
	}
	// Expected deliveries shrink if publishing was cut short by Duration.
	if r.Published < total {
		subWants, expected = wants(perChan(sent))
		for j, k := range counters {
			k.want.Store(subWants[j])
		}
	}
	r.Expected = expected
	end, complete := waitDeliveries(ctx, counters, expected, c.Stall)
	flow.stop()
	flowStopped = true
	r.Overload, r.MaxBacklog = flow.overload, int64(flow.maxBacklog)
	for _, k := range counters {
		r.Delivered += k.n.Load()
	}
	for _, s := range subs {
		r.Dropped += int64(s.Dropped())
		if err := s.Err(); err != nil {
			r.SubsEnded++
			if r.SubErr == "" {
				r.SubErr = err.Error()
			}
		}
	}
	meter.stop(r, r.Delivered)
	r.DeliverElapsed = end.Sub(start)
	r.DeliverRate = float64(r.Delivered) / r.DeliverElapsed.Seconds()
	if !complete {
		return fmt.Errorf("%w: %d of %d messages delivered (%d reported dropped, %d subscriptions ended early%s)",
			ErrIncomplete, r.Delivered, expected, r.Dropped, r.SubsEnded, firstErr(r.SubErr))
	}
	return nil
}

// waitDeliveries waits until the counters add up to want, or no counter
// moved for stall, or ctx ends. It returns the time of the last delivery
// (exact for a complete run, within 5 ms otherwise).
func waitDeliveries(ctx context.Context, cs []*counter, want int64, stall time.Duration) (time.Time, bool) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var last int64 = -1
	lastMove := time.Now()
	for {
		var got int64
		for _, k := range cs {
			got += k.n.Load()
		}
		now := time.Now()
		if got >= want {
			var at int64
			for _, k := range cs {
				at = max(at, k.at.Load())
			}
			if at == 0 { // counters overshot their own want
				return now, true
			}
			return time.Unix(0, at), true
		}
		if got != last {
			last, lastMove = got, now
		} else if now.Sub(lastMove) >= stall {
			return lastMove, false
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return lastMove, false
		}
	}
}

// runAckSync: c.Pubs publishers each publish c.Count messages, waiting for
// each acknowledgement; the round trips go into the latency histogram.
func runAckSync(ctx context.Context, d Driver, c Config, r *Result) error {
	c.Progress.reset("connect", int64(c.Pubs))
	conns, err := connectAll(ctx, d, c.Pubs, c.Progress)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	body := payload(c.Size)
	c.Progress.reset("publish", int64(c.Pubs)*int64(c.Count))
	hists := make([]*Histogram, c.Pubs)
	counts := make([]int64, c.Pubs)
	errs := make(chan error, c.Pubs)
	meter := startMeter(c.Server)
	pctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	start := time.Now()
	for i, pc := range conns {
		hists[i] = NewHistogram()
		go func() {
			ch := fmt.Sprintf("%s.c%d", c.Prefix, i%c.Channels)
			for m := 0; m < c.Count; m++ {
				t := time.Now()
				if err := pc.PublishAcked(pctx, ch, body); err != nil {
					errs <- err
					return
				}
				hists[i].RecordDuration(time.Since(t))
				counts[i]++
				c.Progress.add(1)
			}
			errs <- nil
		}()
	}
	var first error
	for range conns {
		if err := <-errs; err != nil && first == nil && pctx.Err() == nil {
			first = err
		}
	}
	r.Elapsed = time.Since(start)
	h := NewHistogram()
	for i := range hists {
		h.Merge(hists[i])
		r.Published += counts[i]
	}
	meter.stop(r, r.Published)
	s := h.Summary()
	r.Latency = &s
	r.setPubRate(c.Size)
	if first != nil {
		return fmt.Errorf("acked publish: %w", first)
	}
	return nil
}

// setPubRate sets the publish rates from Published and Elapsed, for
// payloads of size bytes.
func (r *Result) setPubRate(size int) {
	r.PubRate = float64(r.Published) / r.Elapsed.Seconds()
	r.MBps = r.PubRate * float64(size) / 1e6
}

// runAckAsync: c.Pubs publishers each publish c.Count messages with at most
// c.Window awaiting acknowledgement; the rate counts acknowledged messages
// until the last acknowledgement.
func runAckAsync(ctx context.Context, d Driver, c Config, r *Result) error {
	c.Progress.reset("connect", int64(c.Pubs))
	conns, err := connectAll(ctx, d, c.Pubs, c.Progress)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	body := payload(c.Size)
	c.Progress.reset("publish", int64(c.Pubs)*int64(c.Count))
	var acked atomic.Int64
	var errMu sync.Mutex
	var first error
	errs := make(chan error, c.Pubs)
	meter := startMeter(c.Server)
	pctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	start := time.Now()
	for i, pc := range conns {
		go func() {
			ch := fmt.Sprintf("%s.c%d", c.Prefix, i%c.Channels)
			window := make(chan struct{}, c.Window)
			done := func(err error) {
				if err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
				} else if n := acked.Add(1); n&1023 == 0 {
					c.Progress.add(1024)
				}
				<-window
			}
			var err error
			for m := 0; m < c.Count; m++ {
				select {
				case window <- struct{}{}:
				case <-pctx.Done():
				}
				if pctx.Err() != nil {
					break
				}
				if err = pc.PublishAsync(pctx, ch, body, done); err != nil {
					<-window
					break
				}
			}
			// Wait for the window to empty: every outstanding ack arrived.
			for k := 0; k < c.Window; k++ {
				select {
				case window <- struct{}{}:
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
			}
			errs <- err
		}()
	}
	var pubErr error
	for range conns {
		if err := <-errs; err != nil && pubErr == nil && pctx.Err() == nil {
			pubErr = err
		}
	}
	r.Elapsed = time.Since(start)
	r.Published = acked.Load()
	meter.stop(r, r.Published)
	r.setPubRate(c.Size)
	errMu.Lock()
	defer errMu.Unlock()
	if pubErr == nil {
		pubErr = first
	}
	if pubErr != nil {
		return fmt.Errorf("pipelined acked publish: %w", pubErr)
	}
	return nil
}

// runLatency: one publisher sends Rate*Duration messages on an open-loop
// schedule; each payload carries its due time, and the subscriber records
// arrival - due. A publisher that falls behind sends the overdue messages at
// once, still stamped with their due times, so stalls show in the tail.
func runLatency(ctx context.Context, d Driver, c Config, r *Result) error {
	nsubs := max(c.Subs, 1) // latency/subs=100: every subscriber's deliveries are measured
	c.Progress.reset("connect", int64(1+nsubs))
	conns, err := connectAll(ctx, d, 1+nsubs, c.Progress)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	pub := conns[0]
	ch := c.Prefix + ".lat"
	n := int(c.Rate * c.Duration.Seconds())
	n = max(n, 1)
	base := time.Now()
	h := NewHistogram()
	var hmu sync.Mutex // handlers run on one goroutine per subscriber; the lock orders them and the final read
	// Messages due before warm (nanoseconds after base) are not recorded:
	// the first Warmup of the schedule (set once the schedule starts).
	var warm atomic.Int64
	warm.Store(math.MaxInt64)
	counters := make([]*counter, nsubs)
	subs := make([]Sub, 0, nsubs)
	defer func() {
		for _, s := range subs {
			s.Close()
		}
	}()
	for j := range nsubs {
		k := newCounter(int64(n), c.Progress)
		counters[j] = k
		sub, err := conns[1+j].Subscribe(ctx, ch, StartLive, func(p []byte) {
			if len(p) >= 8 {
				if due := int64(binary.LittleEndian.Uint64(p)); due >= warm.Load() {
					hmu.Lock()
					h.Record(int64(time.Since(base)) - due)
					hmu.Unlock()
				}
			}
			k.handle(p)
		})
		if err != nil {
			return fmt.Errorf("subscribe: %w", err)
		}
		subs = append(subs, sub)
	}
	body := payload(c.Size)
	c.Progress.reset("latency", int64(n*nsubs))
	meter := startMeter(c.Server)
	pacer := Pacer{Rate: c.Rate, Mode: c.Pacer}
	start := time.Now()
	warm.Store(int64(start.Sub(base) + c.Warmup))
	lag, perr := pacer.Run(ctx, start, n, func(_ int, due time.Time) error {
		binary.LittleEndian.PutUint64(body, uint64(due.Sub(base)))
		return pub.Publish(ctx, ch, body)
	})
	if perr == nil {
		perr = pub.Flush(ctx)
	}
	r.Elapsed = time.Since(start)
	r.Published = int64(n)
	r.setPubRate(c.Size)
	r.MaxSendLag = lag
	if perr != nil {
		return fmt.Errorf("publish: %w", perr)
	}
	r.Expected = int64(n * nsubs)
	end, complete := waitDeliveries(ctx, counters, int64(n*nsubs), c.Stall)
	var subErr error
	for j, k := range counters {
		r.Delivered += k.n.Load()
		r.Dropped += int64(subs[j].Dropped())
		if e := subs[j].Err(); e != nil && subErr == nil {
			subErr = e
		}
	}
	meter.stop(r, r.Delivered)
	r.DeliverElapsed = end.Sub(start)
	r.DeliverRate = float64(r.Delivered) / r.DeliverElapsed.Seconds()
	hmu.Lock()
	s := h.Summary()
	hmu.Unlock()
	r.Latency = &s
	if !complete {
		return fmt.Errorf("%w: %d of %d messages delivered (%d reported dropped%s)", ErrIncomplete, r.Delivered, r.Expected, r.Dropped, firstErr(errString(subErr)))
	}
	return nil
}

// runReplay: publish c.Count messages (pipelined, acknowledged), then time
// a new subscriber reading all of them from the earliest retained one.
func runReplay(ctx context.Context, d Driver, c Config, r *Result) error {
	c.Progress.reset("connect", 2)
	conns, err := connectAll(ctx, d, 2, c.Progress)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	pub, reader := conns[0], conns[1]
	ch := c.Prefix + ".replay"
	body := payload(c.Size)
	c.Progress.reset("fill", int64(c.Count))
	fillStart := time.Now()
	window := make(chan struct{}, c.Window)
	var errMu sync.Mutex
	var first error
	done := func(err error) {
		if err != nil {
			errMu.Lock()
			first = cmp(first, err)
			errMu.Unlock()
		}
		<-window
	}
	for m := 0; m < c.Count; m++ {
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := pub.PublishAsync(ctx, ch, body, done); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
		if m&1023 == 1023 {
			c.Progress.add(1024)
		}
	}
	for k := 0; k < c.Window; k++ {
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	errMu.Lock()
	ferr := first
	errMu.Unlock()
	if ferr != nil {
		return fmt.Errorf("fill: %w", ferr)
	}
	r.Published = int64(c.Count)
	r.PubRate = float64(c.Count) / time.Since(fillStart).Seconds()
	c.Progress.reset("replay", int64(c.Count))
	k := newCounter(int64(c.Count), c.Progress)
	meter := startMeter(c.Server)
	start := time.Now()
	sub, err := reader.Subscribe(ctx, ch, StartEarliest, k.handle)
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	defer sub.Close()
	r.Expected = int64(c.Count)
	end, complete := waitDeliveries(ctx, []*counter{k}, int64(c.Count), c.Stall)
	r.Delivered = k.n.Load()
	r.Dropped = int64(sub.Dropped())
	meter.stop(r, r.Delivered)
	r.DeliverElapsed = end.Sub(start)
	r.Elapsed = r.DeliverElapsed
	r.DeliverRate = float64(r.Delivered) / r.DeliverElapsed.Seconds()
	r.MBps = r.DeliverRate * float64(c.Size) / 1e6
	if !complete {
		return fmt.Errorf("%w: replayed %d of %d messages (%d reported dropped%s)", ErrIncomplete, r.Delivered, c.Count, r.Dropped, firstErr(errString(sub.Err())))
	}
	return nil
}

// firstErr formats an optional error text for an ErrIncomplete message.
func firstErr(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// cmp keeps the first non-nil error.
func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// runIdle opens c.Conns connections that then stay idle, and reports the
// server's resident memory per connection (needs c.Server).
func runIdle(ctx context.Context, d Driver, c Config, r *Result) error {
	need := uint64(c.Conns) + 64
	if c.Server != nil && c.Server.Pid == 0 {
		need += uint64(c.Conns) // the in-process server holds the other ends
	}
	if lim := fileLimit(); lim != 0 && lim < need {
		return fmt.Errorf("%w: %d connections need about %d open files here, the limit is %d (raise ulimit -n, or run the server as a child process)",
			ErrConfig, c.Conns, need, lim)
	}
	var rss0 int64
	if c.Server != nil {
		var err error
		if rss0, err = c.Server.RSS(); err != nil {
			return err
		}
	}
	c.Progress.reset("connect", int64(c.Conns))
	meter := startMeter(c.Server)
	start := time.Now()
	conns, err := connectAll(ctx, d, c.Conns, c.Progress)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	r.Elapsed = time.Since(start)
	r.Conns = int64(len(conns))
	r.ConnRate = float64(len(conns)) / r.Elapsed.Seconds()
	meter.stop(r, 0)
	if c.Server != nil {
		r.MemPerConn = float64(r.ServerRSS-rss0) / float64(len(conns))
	}
	return nil
}
