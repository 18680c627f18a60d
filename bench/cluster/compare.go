package cluster

import (
	"context"
	"fmt"
	"io"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/engine"
	"github.com/sluice-rtm/sluice/internal/benchhook"
)

// CompareConfig is a Compare run's parameters; zero fields take the
// defaults in brackets.
type CompareConfig struct {
	Runs     int           // repetitions, interleaved across setups [3]
	Size     int           // payload bytes [128]
	Count    int           // pubsub: messages published [500,000]
	Rate     float64       // latency: messages per second [20,000]
	Duration time.Duration // latency: publishing time [5 s]
	// Loops is the event loops per node [1: three nodes share the two
	// cores of the reference machine]. At commit b200f89 a node with one
	// loop deadlocked on cross-node calls (see bench-cluster.md).
	Loops int
	// Profile, if not nil, receives a CPU profile (pprof format) of the
	// first pubsub run of ProfileSetup [SetupCross].
	Profile      io.Writer
	ProfileSetup Setup
	// Log, if not nil, receives one line per finished run.
	Log io.Writer
	// PlainLinks adds SetupCrossPlain: a second 3-node cluster of the
	// same build whose node links skip the record layer (the
	// benchmark-only switch benchhook.SetPlainNodeLinks), measured in the
	// same run, interleaved, to give the cost of sealing node links.
	PlainLinks bool
	// Stall is how long a run's wait for deliveries may see none arrive
	// before the run ends incomplete [bench.Config's default, 3 s]; the
	// nodes retain messages for Stall + 15 s, at least 15 s.
	Stall time.Duration
	// RPCTimeout is the clusters' node-to-node request timeout
	// [cluster.Options' default, 2 s]; a link that brings nothing back
	// for two of them is closed.
	RPCTimeout time.Duration
}

func (c *CompareConfig) defaults() {
	if c.Runs <= 0 {
		c.Runs = 3
	}
	if c.Size <= 0 {
		c.Size = 128
	}
	if c.Count <= 0 {
		c.Count = 500_000
	}
	if c.Rate <= 0 {
		c.Rate = 20_000
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.Loops <= 0 {
		c.Loops = 1
	}
	if c.ProfileSetup == "" {
		c.ProfileSetup = SetupCross
	}
}

// Setup names where the publisher and the subscriber connect.
type Setup string

// The setups Compare measures.
const (
	// SetupSingle: one standalone node; publisher and subscriber on it.
	SetupSingle Setup = "single"
	// SetupSame: a 3-node cluster; publisher and subscriber on node a.
	SetupSame Setup = "cluster-same"
	// SetupCross: a 3-node cluster; publisher on node a, subscriber on b.
	SetupCross Setup = "cluster-cross"
	// SetupCrossPlain: as SetupCross, on a cluster whose node links are
	// not sealed (CompareConfig.PlainLinks; its placement is not probed:
	// the probe speaks only sealed node connections).
	SetupCrossPlain Setup = "cluster-cross-plain"
)

// Setups lists the setups in report order.
var Setups = []Setup{SetupSingle, SetupSame, SetupCross}

// Run is one measured run of one scenario on one setup.
type Run struct {
	Setup  Setup
	Result bench.Result
	// Place is where the run's channel lived (cluster setups).
	Place *Placement
	Err   string
}

// CompareReport is what Compare measured.
type CompareReport struct {
	Config CompareConfig
	// Nodes are the cluster's node names; a is the publisher's gateway
	// and b the cross-node subscriber's.
	Nodes []string
	// Setups are the setups measured, in report order.
	Setups []Setup
	// Throughput and Latency hold every run, Runs per setup, in the
	// order they ran.
	Throughput, Latency []Run
}

// Compare starts a standalone node and a 3-node cluster in this process
// and measures, Runs times, interleaved: pubsub 1:1 throughput and
// open-loop latency at Rate for each setup. It returns an error only when
// the nodes cannot start; runs that fail are recorded with their error.
func Compare(ctx context.Context, cfg CompareConfig) (*CompareReport, error) {
	cfg.defaults()
	mutate := func(o *engine.Options) {
		o.Loops = cfg.Loops
		// TTL bounds retained memory; it is long enough for Place after
		// a run, and for a reader that stood still for up to Stall.
		o.TTL = max(15*time.Second, cfg.Stall+15*time.Second)
		if o.Cluster != nil && cfg.RPCTimeout > 0 {
			o.Cluster.RPCTimeout = cfg.RPCTimeout
		}
	}
	single, err := StartNodes(ctx, 1, false, "solo-", mutate)
	if err != nil {
		return nil, err
	}
	defer single.Close()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cl, err := StartNodes(wctx, 3, true, "", mutate)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	probes, err := DialProbes(cl)
	if err != nil {
		return nil, err
	}
	defer probes.Close()
	rep := &CompareReport{Config: cfg, Nodes: cl.Names, Setups: slices.Clone(Setups)}
	drv := func(addr string) bench.Driver { return &bench.SluiceDriver{Addr: addr} }
	a, b := cl.Servers[0].Addr(), cl.Servers[1].Addr()
	drivers := map[Setup]*Split{
		SetupSingle: {Drivers: []bench.Driver{drv(single.Servers[0].Addr())}},
		SetupSame:   {Drivers: []bench.Driver{drv(a)}},
		// pubsub connects the subscriber first: it goes to b.
		SetupCross: {Drivers: []bench.Driver{drv(b), drv(a)}},
	}
	clusters := map[Setup]*Nodes{SetupSame: cl, SetupCross: cl}
	if cfg.PlainLinks {
		benchhook.SetPlainNodeLinks(true)
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		plain, err := StartNodes(pctx, 3, true, "p", mutate)
		pcancel()
		benchhook.SetPlainNodeLinks(false)
		if err != nil {
			return nil, err
		}
		defer plain.Close()
		drivers[SetupCrossPlain] = &Split{Drivers: []bench.Driver{drv(plain.Servers[1].Addr()), drv(plain.Servers[0].Addr())}}
		clusters[SetupCrossPlain] = plain
		rep.Setups = append(rep.Setups, SetupCrossPlain)
	}
	base := bench.Config{Size: cfg.Size, Count: cfg.Count, Duration: time.Minute, Stall: cfg.Stall, Server: &bench.ProcStat{}}
	profiled := cfg.Profile == nil
	for r := 0; r < cfg.Runs; r++ {
		for _, sc := range []string{"pubsub", "latency"} {
			order := rep.Setups
			if cfg.PlainLinks && r%2 == 1 {
				// ABBA: the sealed and the plain cluster alternate which
				// runs first, so neither always inherits the other's
				// garbage and retained history.
				order = slices.Clone(order)
				i, j := slices.Index(order, SetupCross), slices.Index(order, SetupCrossPlain)
				order[i], order[j] = order[j], order[i]
			}
			for _, setup := range order {
				if err := ctx.Err(); err != nil {
					return rep, err
				}
				c := base
				c.Prefix = fmt.Sprintf("cmp.%s.%d", setup, r)
				if sc == "latency" {
					c.Rate, c.Duration = cfg.Rate, cfg.Duration
				}
				d := drivers[setup]
				d.Reset()
				prof := !profiled && setup == cfg.ProfileSetup && sc == "pubsub"
				if prof {
					if err := pprof.StartCPUProfile(cfg.Profile); err != nil {
						return rep, fmt.Errorf("cluster bench: profile: %w", err)
					}
				}
				res, rerr := bench.Run(ctx, d, sc, c)
				if prof {
					pprof.StopCPUProfile()
					profiled = true
				}
				res.Scenario = sc // also when the run failed before it started
				run := Run{Setup: setup, Result: res}
				if rerr != nil {
					run.Err = rerr.Error()
				}
				if setup == SetupSame || setup == SetupCross {
					ch := c.Prefix + ".c0"
					if sc == "latency" {
						ch = c.Prefix + ".lat"
					}
					mgr, _ := cl.ManagerOf(ch)
					if pl, err := probes.Place(ch, mgr); err == nil {
						run.Place = &pl
					} else {
						run.Err = joinErr(run.Err, err)
					}
				}
				if setup != SetupSingle {
					// A failed run can leave nodes marking each other
					// down for a while: let the cluster settle so that
					// runs stay independent.
					sctx, scancel := context.WithTimeout(ctx, 15*time.Second)
					if err := clusters[setup].WaitMembers(sctx, 3); err != nil {
						run.Err = joinErr(run.Err, err)
					}
					scancel()
				}
				if sc == "pubsub" {
					rep.Throughput = append(rep.Throughput, run)
				} else {
					rep.Latency = append(rep.Latency, run)
				}
				if cfg.Log != nil {
					fmt.Fprintf(cfg.Log, "run %d %-13s %s\n", r+1, setup, runLine(run))
				}
			}
		}
	}
	return rep, nil
}

// runLine is a one-line summary of a run for progress logs.
func runLine(r Run) string {
	res := r.Result
	s := ""
	if res.Scenario == "latency" && res.Latency != nil {
		s = fmt.Sprintf("latency p50 %v p99 %v max %v (%d/%d delivered)", time.Duration(res.Latency.P50),
			time.Duration(res.Latency.P99), time.Duration(res.Latency.Max), res.Delivered, res.Expected)
	} else {
		s = fmt.Sprintf("pubsub %.0f msg/s delivered (%d/%d), cpu %.0f ns/msg", res.DeliverRate, res.Delivered, res.Expected, res.CPUPerMsgNs)
	}
	if r.Place != nil {
		s += " " + r.Place.String()
	}
	if r.Err != "" {
		s += " ERROR: " + r.Err
	}
	return s
}

// String renders the placement as "mgr a; hosts b:12/60000 c:11/55000".
func (p Placement) String() string {
	nodes := make([]string, 0, len(p.Msgs))
	for n := range p.Streamlets {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	s := "mgr " + p.Manager + "; hosts"
	for _, n := range nodes {
		if p.Streamlets[n] > 0 {
			s += fmt.Sprintf(" %s:%d/%d", n, p.Streamlets[n], p.Msgs[n])
		}
	}
	return s
}

// Summary is the median over runs of one setup.
type Summary struct {
	Setup       Setup
	Runs        int     // runs that completed
	DeliverRate float64 // pubsub: delivered msg/s
	CPUPerMsg   float64 // pubsub: process CPU ns per delivered message
	P50, P99    time.Duration
	P999, Max   time.Duration
}

// Summaries returns one Summary per setup: medians over the runs that
// completed without error.
func (r *CompareReport) Summaries() []Summary {
	var out []Summary
	setups := r.Setups
	if setups == nil {
		setups = Setups
	}
	for _, setup := range setups {
		s := Summary{Setup: setup}
		var rate, cpu, p50, p99, p999, mx []float64
		for _, run := range r.Throughput {
			if run.Setup == setup && run.Err == "" {
				rate = append(rate, run.Result.DeliverRate)
				cpu = append(cpu, run.Result.CPUPerMsgNs)
			}
		}
		for _, run := range r.Latency {
			if run.Setup == setup && run.Err == "" && run.Result.Latency != nil {
				l := run.Result.Latency
				p50 = append(p50, float64(l.P50))
				p99 = append(p99, float64(l.P99))
				p999 = append(p999, float64(l.P999))
				mx = append(mx, float64(l.Max))
			}
		}
		s.Runs = min(len(rate), len(p50))
		s.DeliverRate, s.CPUPerMsg = median(rate), median(cpu)
		s.P50, s.P99 = time.Duration(median(p50)), time.Duration(median(p99))
		s.P999, s.Max = time.Duration(median(p999)), time.Duration(median(mx))
		out = append(out, s)
	}
	return out
}

// median returns the median of xs (the mean of the middle two for an even
// count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// joinErr appends err's text to the error text s.
func joinErr(s string, err error) string {
	if s == "" {
		return err.Error()
	}
	return s + "; " + err.Error()
}
