// Command placementsim compares Sluice's placement (consistent hashing with
// bounded loads, weighted by capacity and by node and channel load) with the
// classic schemes on one simulated cluster: ring consistent hashing with
// virtual nodes (keyed by channel, and by channel+streamlet), rendezvous
// hashing, jump hash, power of two choices, and pure least-loaded.
//
// Every scheme replays the same world: the same nodes, channels with Zipf
// distributed publish rates, streamlet rollovers at limit-msgs, limit-size or
// limit-life, and the same joins, drains and failures. It prints markdown
// tables. Quick mode (the default) takes well under a minute on 2 cores:
//
//	go run ./bench/placementsim
//
// Full mode, 1M channels for 60 simulated seconds (several minutes, about
// 650 MB):
//
//	go run ./bench/placementsim -full
//
// Flags: -nodes 10,100,1000 (cluster sizes), -channels, -duration
// (simulated seconds), -seed, -zipf (s), -load (true load per capacity unit),
// -eps, -changes (join,drain,fail,...), -workers, -csv FILE (every sample),
// -v (per-scheme wall times), -cpuprofile FILE. Results are deterministic for
// a given seed, except the measured decision costs.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"
)

// verbose: log per-scheme wall times (-v).
var verbose bool

type config struct {
	nodes      []int
	channels   int
	duration   float64 // simulated seconds
	window     float64 // sampling and load-report window, seconds
	seed       uint64
	zipf       float64
	load       float64 // true load per capacity unit, msg/s equivalents
	eps        float64
	changes    []changeKind
	workers    int
	csv        string
	cpuprofile string
}

func parseConfig(args []string) (config, error) {
	fs := flag.NewFlagSet("placementsim", flag.ContinueOnError)
	var (
		nodes    = fs.String("nodes", "10,100,1000", "comma-separated cluster sizes")
		channels = fs.Int("channels", 100000, "channels")
		duration = fs.Float64("duration", 20, "simulated seconds")
		window   = fs.Float64("window", 1, "sampling window, simulated seconds")
		seed     = fs.Uint64("seed", 1, "random seed (the run is deterministic given the seed)")
		zipf     = fs.Float64("zipf", 1.1, "Zipf exponent s of channel popularity")
		load     = fs.Float64("load", 1e6, "true load per capacity unit, in msg/s equivalents (DefaultScorer units)")
		eps      = fs.Float64("eps", 0.25, "bound: at most (1+eps) x fair share")
		changes  = fs.String("changes", "join,drain,fail,join", "membership changes, evenly spread over the run")
		workers  = fs.Int("workers", runtime.GOMAXPROCS(0), "schemes simulated in parallel")
		full     = fs.Bool("full", false, "full mode: 1M channels, 60 simulated seconds (overrides -channels and -duration)")
		csv      = fs.String("csv", "", "write every sample of every scheme to this CSV file")
		v        = fs.Bool("v", false, "log the wall time of each scheme's run to stderr")
		prof     = fs.String("cpuprofile", "", "write a CPU profile of the simulator to this file")
	)
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	verbose = *v
	cfg := config{channels: *channels, duration: *duration, window: *window, seed: *seed, zipf: *zipf,
		load: *load, eps: *eps, workers: *workers, csv: *csv, cpuprofile: *prof}
	if *full {
		cfg.channels, cfg.duration = 1000000, 60
	}
	for _, f := range strings.Split(*nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 3 {
			return cfg, fmt.Errorf("bad -nodes entry %q (need integers >= 3)", f)
		}
		cfg.nodes = append(cfg.nodes, n)
	}
	for _, f := range strings.Split(*changes, ",") {
		switch strings.TrimSpace(f) {
		case "join":
			cfg.changes = append(cfg.changes, join)
		case "drain":
			cfg.changes = append(cfg.changes, drain)
		case "fail":
			cfg.changes = append(cfg.changes, fail)
		case "":
		default:
			return cfg, fmt.Errorf("bad -changes entry %q", f)
		}
	}
	switch {
	case cfg.channels < 1:
		return cfg, fmt.Errorf("-channels must be positive")
	case !(cfg.duration > 0) || !(cfg.window > 0) || cfg.window > cfg.duration:
		return cfg, fmt.Errorf("need 0 < -window <= -duration")
	case !(cfg.eps > 0):
		return cfg, fmt.Errorf("-eps must be positive")
	case !(cfg.load > 0) || !(cfg.zipf > 0):
		return cfg, fmt.Errorf("-load and -zipf must be positive")
	case cfg.workers < 1:
		cfg.workers = 1
	}
	return cfg, nil
}

func main() {
	cfg, err := parseConfig(os.Args[1:])
	if err != nil {
		log.Fatal(err)
	}
	if cfg.cpuprofile != "" {
		f, err := os.Create(cfg.cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	var csvOut io.Writer
	if cfg.csv != "" {
		f, err := os.Create(cfg.csv)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		csvOut = f
		fmt.Fprintln(f, "nodes,scheme,t,max_avg,p99_avg,window_max_avg,window_p99_avg")
	}
	out := os.Stdout
	fmt.Fprintf(out, "# placementsim\n\nchannels=%d duration=%gs window=%gs seed=%d zipf=%g load=%g/capacity-unit eps=%g changes=%v GOMAXPROCS=%d\n",
		cfg.channels, cfg.duration, cfg.window, cfg.seed, cfg.zipf, cfg.load, cfg.eps, cfg.changes, runtime.GOMAXPROCS(0))
	t0 := time.Now()
	for _, n := range cfg.nodes {
		t1 := time.Now()
		wd := newWorld(cfg, n)
		schemes := newSchemes(wd)
		results := make([]result, len(schemes))
		var wg sync.WaitGroup
		sem := make(chan struct{}, cfg.workers)
		for i, sc := range schemes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				t := time.Now()
				results[i] = run(wd, sc)
				if verbose {
					log.Printf("nodes=%d %s: %.1fs", n, sc.name(), time.Since(t).Seconds())
				}
			}()
		}
		wg.Wait()
		for i, sc := range schemes { // decision cost, one scheme at a time
			timeDecisions(wd, sc, &results[i])
		}
		report(out, wd, results, time.Since(t1))
		if csvOut != nil {
			for _, r := range results {
				for _, s := range r.samples {
					fmt.Fprintf(csvOut, "%d,%s,%g,%.4f,%.4f,%.4f,%.4f\n", n, r.scheme, s.t, s.maxAvg, s.p99Avg, s.wMaxAvg, s.wP99Avg)
				}
			}
		}
	}
	fmt.Fprintf(out, "\ntotal wall time %.1fs\n", time.Since(t0).Seconds())
}
