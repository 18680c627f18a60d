package cluster

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/engine"
)

// SpreadConfig is a Spread run's parameters; zero fields take the
// defaults in brackets.
type SpreadConfig struct {
	HotRate   float64       // the hot channel's messages per second [20,000]
	Duration  time.Duration // publishing time [10 s]
	Cold      int           // cold channels [200]
	ColdRate  float64       // messages per second per cold channel [1]
	Size      int           // payload bytes [128]
	LimitLife time.Duration // streamlet write lease [1 s]
	LimitMsgs int           // streamlet message limit [5,000]
	TTL       time.Duration // streamlet retention [3 s]
	Sample    time.Duration // sampling interval of the nodes' load reports [250 ms]
	Loops     int           // event loops per node [1] (see CompareConfig.Loops)
	// Log, if not nil, receives progress lines.
	Log io.Writer
}

func (c *SpreadConfig) defaults() {
	if c.HotRate <= 0 {
		c.HotRate = 20_000
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Cold <= 0 {
		c.Cold = 200
	}
	if c.ColdRate <= 0 {
		c.ColdRate = 1
	}
	if c.Size <= 0 {
		c.Size = 128
	}
	if c.LimitLife <= 0 {
		c.LimitLife = time.Second
	}
	if c.LimitMsgs <= 0 {
		c.LimitMsgs = 5000
	}
	if c.TTL <= 0 {
		c.TTL = 3 * time.Second
	}
	if c.Sample <= 0 {
		c.Sample = 250 * time.Millisecond
	}
	if c.Loops <= 0 {
		c.Loops = 1
	}
}

// NodeSpread is one node's share of a Spread run.
type NodeSpread struct {
	Name string
	// StreamletsMax and StreamletsMean are the node's hosted-streamlet
	// gauge (its load report) over the samples of the publishing phase.
	StreamletsMax  int
	StreamletsMean float64
	// ChannelsMax is the largest managed-channel count reported.
	ChannelsMax int
	// Managed counts the run's channels (of Cold+1) the node manages
	// (ManagerOf).
	Managed int
	// Appended estimates the messages appended to the node's streamlets:
	// the sum of its distinct load reports' rate times the report
	// interval.
	Appended float64
	// MsgsInMax is the highest append rate it reported (msg/s).
	MsgsInMax float64
	// HotStreamlets and HotMsgs are the hot channel's streamlets the node
	// hosted during the run and the messages they held (LIST).
	HotStreamlets int
	HotMsgs       int64
	// MsgsIn is the node's Metrics.MessagesIn: publishes stored from its
	// clients plus records it appended for peers' gateways (NODE_APPEND).
	MsgsIn int64
}

// SpreadReport is what Spread measured.
type SpreadReport struct {
	Config     SpreadConfig
	Nodes      []NodeSpread
	HotChannel string
	HotManager string
	Samples    int
	// DegradedSamples counts the samples at which some node saw a peer
	// as not alive (suspect, unreachable after a failed link, ...).
	DegradedSamples int
	// Scheduled counts the messages the run tried to publish; Published
	// those acknowledged; Delivered those received, hot and cold.
	HotScheduled, ColdScheduled  int64
	HotPublished, HotDelivered   int64
	ColdPublished, ColdDelivered int64
	// Dropped is what the subscribers were told they missed.
	Dropped int64
	// PubErrors counts refused publishes, PubErr names the first;
	// Unacked counts publishes never answered.
	PubErrors, Unacked int64
	PubErr             string
	// MaxSendLag is the hot publisher's worst lag behind its schedule.
	MaxSendLag time.Duration
	Elapsed    time.Duration
}

// HotHosts returns how many nodes hosted streamlets of the hot channel.
func (r *SpreadReport) HotHosts() int {
	n := 0
	for _, ns := range r.Nodes {
		if ns.HotStreamlets > 0 {
			n++
		}
	}
	return n
}

// Spread starts a 3-node cluster with short streamlet limits and
// publishes, for cfg.Duration, one hot channel at HotRate (publisher on
// node a, subscriber on b) and Cold channels at ColdRate each (one
// publisher per node, one subscriber for all on c). It samples every
// node's load report, follows the hot channel's streamlets with LIST, and
// checks that every message was delivered (ErrCheck otherwise; the report
// is returned with it).
func Spread(ctx context.Context, cfg SpreadConfig) (*SpreadReport, error) {
	cfg.defaults()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ns, err := StartNodes(wctx, 3, true, "", func(o *engine.Options) {
		o.Loops = cfg.Loops
		o.LimitLife, o.LimitMsgs, o.TTL = cfg.LimitLife, cfg.LimitMsgs, cfg.TTL
		o.Cluster.ReportInterval = cfg.Sample
	})
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	probes, err := DialProbes(ns)
	if err != nil {
		return nil, err
	}
	defer probes.Close()
	rep := &SpreadReport{Config: cfg, HotChannel: "spread.hot"}
	for _, n := range ns.Names {
		rep.Nodes = append(rep.Nodes, NodeSpread{Name: n})
	}
	cold := make([]string, cfg.Cold)
	for i := range cold {
		cold[i] = fmt.Sprintf("spread.cold.%d", i)
	}
	conns := map[string]bench.Client{}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	dial := func(key string, node int) (bench.Client, error) {
		c, err := (&bench.SluiceDriver{Addr: ns.Servers[node].Addr()}).Connect(ctx)
		if err != nil {
			return nil, err
		}
		conns[key] = c
		return c, nil
	}
	var hotN, coldN atomic.Int64
	hotSub, err := dial("hot-sub", 1)
	if err != nil {
		return nil, err
	}
	hs, err := hotSub.Subscribe(ctx, rep.HotChannel, bench.StartLive, func([]byte) { hotN.Add(1) })
	if err != nil {
		return nil, err
	}
	subs := []bench.Sub{hs}
	coldSub, err := dial("cold-sub", 2)
	if err != nil {
		return nil, err
	}
	for _, ch := range cold {
		s, err := coldSub.Subscribe(ctx, ch, bench.StartLive, func([]byte) { coldN.Add(1) })
		if err != nil {
			return nil, err
		}
		subs = append(subs, s)
	}
	hotPub, err := dial("hot-pub", 0)
	if err != nil {
		return nil, err
	}
	coldPubs := make([]bench.Client, 3)
	for i := range coldPubs {
		if coldPubs[i], err = dial(fmt.Sprintf("cold-pub-%d", i), i); err != nil {
			return nil, err
		}
	}
	body := make([]byte, cfg.Size)
	coldBody := make([]byte, cfg.Size)
	nHot := max(1, int(cfg.HotRate*cfg.Duration.Seconds()))
	nCold := max(1, int(cfg.ColdRate*float64(cfg.Cold)*cfg.Duration.Seconds()))
	rep.HotScheduled, rep.ColdScheduled = int64(nHot), int64(nCold)
	pctx, pcancel := context.WithCancel(ctx) // ends the publishers early
	defer pcancel()
	// Publishes are acknowledged asynchronously: a refused publish is
	// counted (PubErrors) and the schedule goes on, so that a failing
	// cluster shows as failed publishes, not as an aborted run.
	var hotOK, coldOK, pubErrs, outstanding atomic.Int64
	var firstErr atomic.Value
	ack := func(ok *atomic.Int64) func(error) {
		return func(err error) {
			if err != nil {
				pubErrs.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			} else {
				ok.Add(1)
			}
			outstanding.Add(-1)
		}
	}
	hotAck, coldAck := ack(&hotOK), ack(&coldOK)
	publish := func(c bench.Client, ch string, b []byte, done func(error)) error {
		outstanding.Add(1)
		if err := c.PublishAsync(pctx, ch, b, done); err != nil {
			outstanding.Add(-1)
			pubErrs.Add(1)
			firstErr.CompareAndSwap(nil, err.Error())
			return err
		}
		return nil
	}
	start := time.Now()
	var maxLag time.Duration // written by the hot publisher before hotDone closes
	hotDone := make(chan struct{})
	go func() {
		defer close(hotDone)
		p := bench.Pacer{Rate: cfg.HotRate}
		maxLag, _ = p.Run(pctx, start, nHot, func(int, time.Time) error {
			_ = publish(hotPub, rep.HotChannel, body, hotAck)
			return nil
		})
	}()
	coldDone := make(chan struct{})
	go func() {
		defer close(coldDone)
		p := bench.Pacer{Rate: cfg.ColdRate * float64(cfg.Cold)}
		_, _ = p.Run(pctx, start, nCold, func(i int, _ time.Time) error {
			k := i % cfg.Cold
			_ = publish(coldPubs[k%3], cold[k], coldBody, coldAck)
			return nil
		})
	}()
	// Sample the load reports and follow the hot channel's streamlets
	// while publishing.
	type seen struct {
		node string
		msgs uint32
	}
	hot := map[uint64]seen{}
	listHot := func() error {
		for i, p := range probes {
			hs, err := p.List(rep.HotChannel)
			if err != nil {
				return err
			}
			for _, h := range hs {
				if s, ok := hot[h.ID]; !ok || h.Len > s.msgs {
					hot[h.ID] = seen{ns.Names[i], h.Len}
				}
			}
		}
		return nil
	}
	lastRate := make([]float64, 3)
	stSum := make([]float64, 3)
	tick := time.NewTicker(cfg.Sample)
	defer tick.Stop()
	// abort stops the publishers and waits for them (they use the
	// connections closed on return).
	abort := func(err error) (*SpreadReport, error) {
		pcancel()
		<-hotDone
		<-coldDone
		return rep, err
	}
	hd, cd := hotDone, coldDone
	for hd != nil || cd != nil {
		select {
		case <-hd:
			hd = nil
		case <-cd:
			cd = nil
		case <-tick.C:
			rep.Samples++
			if !ns.AllAlive() {
				rep.DegradedSamples++
			}
			for i := range ns.Servers {
				m, _ := ns.Self(i)
				n := &rep.Nodes[i]
				n.StreamletsMax = max(n.StreamletsMax, m.Streamlets)
				stSum[i] += float64(m.Streamlets)
				n.ChannelsMax = max(n.ChannelsMax, m.Channels)
				n.MsgsInMax = max(n.MsgsInMax, m.MsgsIn)
				if m.MsgsIn != lastRate[i] {
					n.Appended += m.MsgsIn * cfg.Sample.Seconds()
					lastRate[i] = m.MsgsIn
				}
			}
			if rep.Samples%2 == 0 {
				if err := listHot(); err != nil {
					return abort(err)
				}
			}
		case <-ctx.Done():
			return abort(ctx.Err())
		}
	}
	rep.Elapsed = time.Since(start)
	rep.MaxSendLag = maxLag
	// Wait for the acknowledgements, then for the deliveries (no progress
	// for 5 s ends either wait).
	last, lastMove := int64(-1), time.Now()
	for {
		acked := outstanding.Load() == 0
		rep.HotPublished, rep.ColdPublished = hotOK.Load(), coldOK.Load()
		if acked && hotN.Load() >= rep.HotPublished && coldN.Load() >= rep.ColdPublished {
			break
		}
		if got := hotN.Load() + coldN.Load() + hotOK.Load() + coldOK.Load() + pubErrs.Load(); got != last {
			last, lastMove = got, time.Now()
		} else if time.Since(lastMove) > 5*time.Second {
			break
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return rep, ctx.Err()
		}
	}
	rep.HotPublished, rep.ColdPublished = hotOK.Load(), coldOK.Load()
	rep.HotDelivered, rep.ColdDelivered = hotN.Load(), coldN.Load()
	rep.PubErrors = pubErrs.Load()
	rep.Unacked = outstanding.Load()
	if e, ok := firstErr.Load().(string); ok {
		rep.PubErr = e
	}
	for _, s := range subs {
		rep.Dropped += int64(s.Dropped())
	}
	// One more load report (they come every cfg.Sample) covers the last
	// appends; then the final view.
	select {
	case <-time.After(cfg.Sample + cfg.Sample/2):
	case <-ctx.Done():
		return rep, ctx.Err()
	}
	for i := range ns.Servers {
		m, _ := ns.Self(i)
		if m.MsgsIn != lastRate[i] {
			rep.Nodes[i].Appended += m.MsgsIn * cfg.Sample.Seconds()
		}
		if rep.Samples > 0 {
			rep.Nodes[i].StreamletsMean = stSum[i] / float64(rep.Samples)
		}
		mctx, mcancel := context.WithTimeout(ctx, 2*time.Second)
		rep.Nodes[i].MsgsIn = ns.Servers[i].Metrics(mctx).MessagesIn
		mcancel()
	}
	if err := listHot(); err != nil {
		return rep, err
	}
	for _, s := range hot {
		for i := range rep.Nodes {
			if rep.Nodes[i].Name == s.node {
				rep.Nodes[i].HotStreamlets++
				rep.Nodes[i].HotMsgs += int64(s.msgs)
			}
		}
	}
	for _, ch := range append([]string{rep.HotChannel}, cold...) {
		mgr, err := ns.ManagerOf(ch)
		if err != nil {
			return rep, err
		}
		if ch == rep.HotChannel {
			rep.HotManager = mgr
		}
		for i := range ns.Names {
			if ns.Names[i] == mgr {
				rep.Nodes[i].Managed++
			}
		}
	}
	return rep, rep.Check()
}

// Check reports (ErrCheck) a run that lost messages or kept the hot
// channel on fewer than two nodes.
func (r *SpreadReport) Check() error {
	switch {
	case r.PubErrors > 0 || r.Unacked > 0 || r.HotPublished != r.HotScheduled || r.ColdPublished != r.ColdScheduled:
		return fmt.Errorf("%w: published hot %d/%d, cold %d/%d; %d refused, %d unanswered (first: %s)", ErrCheck,
			r.HotPublished, r.HotScheduled, r.ColdPublished, r.ColdScheduled, r.PubErrors, r.Unacked, r.PubErr)
	case r.HotDelivered != r.HotPublished || r.ColdDelivered != r.ColdPublished:
		return fmt.Errorf("%w: delivered hot %d/%d, cold %d/%d (%d reported dropped)", ErrCheck,
			r.HotDelivered, r.HotPublished, r.ColdDelivered, r.ColdPublished, r.Dropped)
	case r.HotHosts() < 2:
		return fmt.Errorf("%w: the hot channel's streamlets were hosted by %d node(s)", ErrCheck, r.HotHosts())
	}
	return nil
}
