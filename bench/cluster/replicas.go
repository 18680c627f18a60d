package cluster

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/engine"
)

// ReplicasConfig is a CompareReplicas run's parameters; zero fields take
// the defaults in brackets.
type ReplicasConfig struct {
	Runs     int // repetitions; each runs N = 1, 2, 3 in a rotating order [3]
	Size     int // payload bytes [128]
	Count    int // messages per publisher [100,000]
	Pubs     int // publisher connections, each on a channel of its own [4]
	Window   int // acknowledged publishes in flight per publisher [1,024]
	Loops    int // event loops per node [1]
	Log      io.Writer
	Replicas []int // the replica counts compared [1, 2, 3]
}

func (c *ReplicasConfig) defaults() {
	if c.Runs <= 0 {
		c.Runs = 3
	}
	if c.Size <= 0 {
		c.Size = 128
	}
	if c.Count <= 0 {
		c.Count = 100_000
	}
	if c.Pubs <= 0 {
		c.Pubs = 4
	}
	if c.Window <= 0 {
		c.Window = 1024
	}
	if c.Loops <= 0 {
		c.Loops = 1
	}
	if len(c.Replicas) == 0 {
		c.Replicas = []int{1, 2, 3}
	}
}

// ReplicasRun is one measured run at one replica count.
type ReplicasRun struct {
	Replicas int
	Result   bench.Result
	Err      string
}

// CompareReplicas starts one 3-node cluster in this process whose
// channel rules give channels "rN." N replicas, and measures acknowledged
// pipelined publish throughput (scenario ack-async, publishers on node a)
// at each replica count, Runs times, the order rotating each run, so that
// the counts are compared in the same run on the same nodes.
func CompareReplicas(ctx context.Context, cfg ReplicasConfig) ([]ReplicasRun, error) {
	cfg.defaults()
	mutate := func(o *engine.Options) {
		o.Loops = cfg.Loops
		o.TTL = 10 * time.Second // bounds retained memory
		for _, n := range cfg.Replicas {
			o.ChannelRules = append(o.ChannelRules, engine.ChannelRule{Prefix: fmt.Sprintf("r%d.", n), Replicas: n})
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cl, err := StartNodes(wctx, 3, true, "", mutate)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	drv := &bench.SluiceDriver{Addr: cl.Servers[0].Addr()}
	var runs []ReplicasRun
	for r := 0; r < cfg.Runs; r++ {
		order := slices.Clone(cfg.Replicas)
		for k := 0; k < r%len(order); k++ { // rotate: each count goes first once
			order = append(order[1:], order[0])
		}
		for _, n := range order {
			if err := ctx.Err(); err != nil {
				return runs, err
			}
			c := bench.Config{Size: cfg.Size, Count: cfg.Count, Pubs: cfg.Pubs, Channels: cfg.Pubs, Window: cfg.Window,
				Duration: time.Minute, Prefix: fmt.Sprintf("r%d.run%d", n, r), Server: &bench.ProcStat{}}
			res, rerr := bench.Run(ctx, drv, "ack-async", c)
			run := ReplicasRun{Replicas: n, Result: res}
			if rerr != nil {
				run.Err = rerr.Error()
			}
			sctx, scancel := context.WithTimeout(ctx, 15*time.Second)
			if err := cl.WaitMembers(sctx, 3); err != nil {
				run.Err = joinErr(run.Err, err)
			}
			scancel()
			runs = append(runs, run)
			if cfg.Log != nil {
				fmt.Fprintf(cfg.Log, "run %d replicas=%d: %.0f acked msg/s (%d), cpu %.0f ns/msg %s\n", r+1, n,
					res.PubRate, res.Published, res.CPUPerMsgNs, run.Err)
			}
		}
	}
	return runs, nil
}

// ReplicasMedians returns, per replica count, the median acknowledged
// publish rate over the runs that completed.
func ReplicasMedians(runs []ReplicasRun) map[int]float64 {
	rates := map[int][]float64{}
	for _, r := range runs {
		if r.Err == "" {
			rates[r.Replicas] = append(rates[r.Replicas], r.Result.PubRate)
		}
	}
	out := map[int]float64{}
	for n, xs := range rates {
		out[n] = median(xs)
	}
	return out
}
