package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/bench"
)

// row is one run's outcome.
type row struct {
	Setup     string
	Run       int
	Acked     int64 // publishes acknowledged
	Failed    int64 // publishes answered with an error
	Rate      float64
	Delivered int64 // deliveries, duplicates included
	Lost      int64 // acknowledged, never delivered
	Dup       int64 // deliveries of a message already delivered
	Reorder   int64 // deliveries that skipped ahead of their publisher's order
	Lat       *bench.LatencySummary
	Load1     [2]float64
	// CPU over the publishing time Elapsed (start to the last
	// acknowledgement): each node of the system under test, and this
	// load generator (its publishers and subscribers).
	NodeCPU []time.Duration
	GenCPU  time.Duration
	Elapsed time.Duration
	Err     string
}

// ServerCPUPerMsg is the nodes' CPU time per acknowledged message.
func (r row) ServerCPUPerMsg() time.Duration {
	var sum time.Duration
	for _, c := range r.NodeCPU {
		sum += c
	}
	if r.Acked == 0 {
		return 0
	}
	return sum / time.Duration(r.Acked)
}

// cpuTimes reads the CPU time of every process in ps.
func cpuTimes(ps []bench.ProcStat) []time.Duration {
	out := make([]time.Duration, len(ps))
	for i, p := range ps {
		out[i], _ = p.CPU() // a node that died shows 0; its row fails anyway
	}
	return out
}

// workload is one run's shape.
type workload struct {
	drivers     []bench.Driver   // one per node
	procs       []bench.ProcStat // the nodes' processes, for their CPU time
	prefix      string           // channel name prefix, e.g. "rb.r3.run1"
	pubsPerNode int
	channels    int
	window      int
	size        int
	duration    time.Duration
	rate        float64 // > 0: paced (total over all publishers), latency recorded
}

// subState is one channel's subscriber: per publisher the last sequence
// seen. Its handler runs on one goroutine (bench.Handler's contract).
type subState struct {
	last                    []int64
	delivered, dup, reorder int64
	hist                    *bench.Histogram
	mu                      sync.Mutex // guards the fields for the final read
}

// payload layout: publisher u32, sequence u64 (from 1), due time unix ns i64
// (0 in throughput runs: the clock is read only where a latency is kept;
// on the reference VM clock reads were 21% of the load generator's CPU).
func (s *subState) handle(p []byte) {
	var now int64
	if s.hist != nil {
		now = time.Now().UnixNano()
	}
	if len(p) < 20 {
		return
	}
	pub := int(binary.LittleEndian.Uint32(p))
	seq := int64(binary.LittleEndian.Uint64(p[4:]))
	due := int64(binary.LittleEndian.Uint64(p[12:]))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delivered++
	if pub >= len(s.last) {
		return
	}
	switch {
	case seq <= s.last[pub]:
		s.dup++
		return
	case seq != s.last[pub]+1:
		s.reorder++
	}
	s.last[pub] = seq
	if s.hist != nil {
		s.hist.Record(now - due)
	}
}

// unique is the messages delivered at least once (each publisher writes
// one channel in order: its highest sequence seen, less what skipped).
func (s *subState) unique() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delivered - s.dup
}

// runLoad runs w once. Every connection it opens is closed before it
// returns.
func runLoad(ctx context.Context, w workload) (r row) {
	r.Load1[0] = bench.LoadAvg()
	defer func() { r.Load1[1] = bench.LoadAvg() }()
	nodes := len(w.drivers)
	npub := nodes * w.pubsPerNode
	var clients []bench.Client
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	subs := make([]*subState, w.channels)
	chName := func(i int) string { return fmt.Sprintf("%s.c%d", w.prefix, i) }
	for i := range subs {
		subs[i] = &subState{last: make([]int64, npub)}
		if w.rate > 0 {
			subs[i].hist = bench.NewHistogram()
		}
		c, err := w.drivers[(i+1)%nodes].Connect(ctx)
		if err != nil {
			r.Err = err.Error()
			return r
		}
		clients = append(clients, c)
		if _, err := c.Subscribe(ctx, chName(i), bench.StartLive, subs[i].handle); err != nil {
			r.Err = err.Error()
			return r
		}
	}
	pubs := make([]bench.Client, npub)
	for p := range pubs {
		c, err := w.drivers[p%nodes].Connect(ctx)
		if err != nil {
			r.Err = err.Error()
			return r
		}
		clients = append(clients, c)
		pubs[p] = c
	}
	var acked, failed atomic.Int64
	var errOnce sync.Once
	var firstErr error
	pctx, cancel := context.WithTimeout(ctx, w.duration)
	defer cancel()
	self := bench.ProcStat{}
	gen0, _ := self.CPU()
	node0 := cpuTimes(w.procs)
	start := time.Now()
	var wg sync.WaitGroup
	for p, pc := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := chName(p % w.channels)
			buf := make([]byte, w.size)
			binary.LittleEndian.PutUint32(buf, uint32(p))
			window := make(chan struct{}, w.window)
			done := func(err error) {
				if err != nil {
					failed.Add(1)
					errOnce.Do(func() { firstErr = err })
				} else {
					acked.Add(1)
				}
				<-window
			}
			send := func(seq int, due time.Time) error {
				select {
				case window <- struct{}{}:
				case <-pctx.Done():
					return pctx.Err()
				}
				binary.LittleEndian.PutUint64(buf[4:], uint64(seq))
				var dueNs int64
				if !due.IsZero() {
					dueNs = due.UnixNano()
				}
				binary.LittleEndian.PutUint64(buf[12:], uint64(dueNs))
				if err := pc.PublishAsync(pctx, ch, buf, done); err != nil {
					<-window
					return err
				}
				return nil
			}
			var err error
			if w.rate > 0 {
				pacer := bench.Pacer{Rate: w.rate / float64(npub), Mode: bench.PacerSleep}
				n := int(pacer.Rate * w.duration.Seconds())
				_, err = pacer.Run(pctx, start, n, func(i int, due time.Time) error { return send(i+1, due) })
			} else {
				for seq := 1; err == nil; seq++ {
					err = send(seq, time.Time{})
				}
			}
			if err != nil && pctx.Err() == nil {
				errOnce.Do(func() { firstErr = err })
			}
			// Every outstanding acknowledgement arrives (bounded by ctx).
			for range w.window {
				select {
				case window <- struct{}{}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	r.Elapsed = elapsed
	r.NodeCPU = cpuTimes(w.procs)
	for i := range r.NodeCPU {
		r.NodeCPU[i] = max(0, r.NodeCPU[i]-node0[i])
	}
	if gen1, err := self.CPU(); err == nil {
		r.GenCPU = gen1 - gen0
	}
	r.Acked, r.Failed = acked.Load(), failed.Load()
	r.Rate = float64(r.Acked) / elapsed.Seconds()
	// Deliveries: wait until every acknowledged message arrived, or 3 s
	// without progress.
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var got, prev int64
	lastProgress := time.Now()
	for {
		got = 0
		for _, s := range subs {
			got += s.unique()
		}
		if got >= r.Acked || time.Since(lastProgress) > 3*time.Second || ctx.Err() != nil {
			break
		}
		if got != prev {
			prev, lastProgress = got, time.Now()
		}
		<-t.C
	}
	hist := bench.NewHistogram()
	for _, s := range subs {
		s.mu.Lock()
		r.Delivered += s.delivered
		r.Dup += s.dup
		r.Reorder += s.reorder
		if s.hist != nil {
			hist.Merge(s.hist)
		}
		s.mu.Unlock()
	}
	r.Lost = max(0, r.Acked-got)
	if w.rate > 0 {
		sum := hist.Summary()
		r.Lat = &sum
	}
	switch {
	case firstErr != nil:
		r.Err = firstErr.Error()
	case ctx.Err() != nil:
		r.Err = ctx.Err().Error()
	case r.Acked == 0:
		r.Err = errors.New("nothing acknowledged").Error()
	}
	return r
}
