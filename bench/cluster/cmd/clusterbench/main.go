// Command clusterbench measures Sluice's cluster mode in one process: a
// standalone node against a 3-node loopback cluster (1:1 throughput and
// latency with the publisher and the subscriber on different nodes), and
// the load spread of one hot and many cold channels over the cluster.
//
//	go run ./bench/cluster/cmd/clusterbench [--quick] [--runs N] [--cpuprofile FILE] [--only compare|spread]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"time"

	"github.com/sluice-rtm/sluice/bench/cluster"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("clusterbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "small counts and durations (about a minute in all)")
	runs := fs.Int("runs", 0, "repetitions of each compare measurement, `N` (default 3; --quick 1)")
	loops := fs.Int("loops", 0, "event loops per node, `N` (default 1)")
	count := fs.Int("count", 0, "pubsub messages, `N` (default 500000; --quick 100000)")
	rate := fs.Float64("rate", 20_000, "latency and hot-channel rate, msg/s, `R`")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the first pubsub run of --profile-setup to `FILE`")
	profSetup := fs.String("profile-setup", string(cluster.SetupCross), "setup to profile: single, cluster-same or cluster-cross")
	only := fs.String("only", "", "run only `PART`: compare or spread")
	size := fs.Int("size", 0, "payload bytes of the compare runs, `N` (default 128)")
	plain := fs.Bool("plain-links", false, "also measure cluster-cross on a cluster whose node links are not sealed (same build; a benchmark-only switch)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || (*only != "" && *only != "compare" && *only != "spread") {
		fmt.Fprintln(stderr, "clusterbench: unexpected arguments; see --help")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Fprintf(stdout, "clusterbench: %s, GOMAXPROCS %d, %s\n\n", runtime.Version(), runtime.GOMAXPROCS(0), time.Now().UTC().Format(time.RFC3339))
	status := 0
	fmt.Fprintf(stdout, "load average at start: %s\n", loadavg())
	if *only != "spread" {
		cfg := cluster.CompareConfig{Runs: *runs, Count: *count, Rate: *rate, Loops: *loops, Log: stderr, PlainLinks: *plain, Size: *size}
		if *quick {
			if *runs == 0 {
				cfg.Runs = 1
			}
			if cfg.Count == 0 {
				cfg.Count = 100_000
			}
			cfg.Duration = 2 * time.Second
		}
		if *profile != "" {
			f, err := os.Create(*profile)
			if err != nil {
				fmt.Fprintln(stderr, "clusterbench:", err)
				return 1
			}
			defer f.Close()
			cfg.Profile, cfg.ProfileSetup = f, cluster.Setup(*profSetup)
		}
		rep, err := cluster.Compare(ctx, cfg)
		if err != nil {
			fmt.Fprintln(stderr, "clusterbench: compare:", err)
			status = 1
		}
		if rep != nil {
			cluster.WriteCompare(stdout, rep)
			fmt.Fprintf(stdout, "load average after compare: %s\n\n", loadavg())
		}
	}
	if *only != "compare" && ctx.Err() == nil {
		cfg := cluster.SpreadConfig{HotRate: *rate, Loops: *loops, Log: stderr}
		if *quick {
			cfg.Duration = 4 * time.Second
		}
		rep, err := cluster.Spread(ctx, cfg)
		if err != nil {
			fmt.Fprintln(stderr, "clusterbench: spread:", err)
			status = 1
		}
		if rep != nil {
			cluster.WriteSpread(stdout, rep)
			fmt.Fprintf(stdout, "load average after spread: %s\n", loadavg())
		}
	}
	return status
}

// loadavg returns the 1, 5 and 15 minute load averages (Linux), or "?".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
