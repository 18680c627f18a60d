// Command fair measures Sluice against NATS as users run them: the
// shipped binaries at their defaults (`sluice serve`, built from this
// repository, and plain `nats-server` v2.15.2, no JetStream), each SDK's
// ordinary receive path (Sluice: Subscribe + Next; nats.go: async
// Subscribe), SubscribeFunc and Events as rows of their own, every loss
// counted on both sides. Each row runs in two states: fresh (both servers
// restarted before every run) and steady (before every run, 1.25 GiB is
// published to each server, so that Sluice's history budget, 1 GiB by
// default, is full and retention evicts while the run measures), and,
// where subscribers can fall behind, in two regimes: live (the publisher
// stays within 1 MiB of payload of its subscribers) and overload (it
// publishes as fast as the server takes messages, far past the
// per-subscriber limits). Runs alternate ABBA in pairs; the table gives
// the median of the pairs' ratios with its range, each side's median and
// range, the losses and the load average. It prints BENCHMARKS.md's first
// screen:
//
//	cd bench/peer && go run ./cmd/fair --markdown
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/bench/internal/benchcmd"
)

func main() { benchcmd.Main(run) }

// options is the parsed command line.
type options struct {
	pairs    int
	rows     []row
	states   []string
	regimes  map[regime]bool
	scale    float64
	fill     int64
	dir      string
	jsonPath string
	markdown bool
	args     []string
}

const usage = `Usage: go run ./cmd/fair [FLAGS]   (from bench/peer)

Runs the fair table: every row in the states and regimes asked for, in
alternated pairs (--pairs), and prints the table (--markdown: as
BENCHMARKS.md shows it). Rows: %s.

Flags:
`

func parse(args []string, stderr io.Writer) (options, error) {
	o := options{args: args}
	fs := flag.NewFlagSet("fair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keys := make([]string, len(rows))
	for i, r := range rows {
		keys[i] = r.key
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, usage, strings.Join(keys, ", "))
		fs.PrintDefaults()
	}
	fs.IntVar(&o.pairs, "pairs", 5, "alternated pairs (Sluice, NATS) per row, state and regime, `N`")
	rowList := fs.String("rows", "all", "rows to run, comma-separated `KEYS` (all: every row)")
	states := fs.String("states", "fresh,steady", "states, `LIST` of fresh and steady")
	regimes := fs.String("regimes", "live,overload", "regimes of the rows that have them, `LIST` of live and overload")
	fs.Float64Var(&o.scale, "scale", 1, "multiply every message count by `F` (e.g. 0.1 for a quick look; the table then says so)")
	fs.Int64Var(&o.fill, "fill", 1280<<20, "steady state: `BYTES` published to each server before each run (1.25 x Sluice's default --max-retained)")
	fs.StringVar(&o.dir, "dir", "", "`DIR` for the binaries and the servers' logs (default: a new temporary directory)")
	fs.StringVar(&o.jsonPath, "json", "", "also write every run's result to `FILE` (JSON)")
	fs.BoolVar(&o.markdown, "markdown", false, "print the table as Markdown")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.pairs < 1 || o.scale <= 0 || o.fill < 0 {
		return o, errors.New("--pairs must be >= 1, --scale > 0, --fill >= 0")
	}
	for _, k := range strings.Split(*rowList, ",") {
		found := false
		for _, r := range rows {
			if k == "all" || r.key == k {
				o.rows, found = append(o.rows, r), true
			}
		}
		if !found {
			return o, fmt.Errorf("unknown row %q (one of: all, %s)", k, strings.Join(keys, ", "))
		}
	}
	for _, s := range strings.Split(*states, ",") {
		if s != "fresh" && s != "steady" {
			return o, fmt.Errorf("unknown state %q (fresh, steady)", s)
		}
		o.states = append(o.states, s)
	}
	o.regimes = map[regime]bool{}
	for _, g := range strings.Split(*regimes, ",") {
		if g != string(regimeLive) && g != string(regimeOverload) {
			return o, fmt.Errorf("unknown regime %q (live, overload)", g)
		}
		o.regimes[regime(g)] = true
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	return benchcmd.Run(ctx, "fair", stderr, err, &benchcmd.Flags{Runs: 1}, nil, func() error {
		return fair(ctx, o, stdout, stderr)
	})
}

// cell is the measurement of one row in one state and regime.
type cell struct {
	row    row
	state  string
	regime regime
	p      bench.Paired
}

// fair runs the table.
func fair(ctx context.Context, o options, stdout, stderr io.Writer) error {
	dir := o.dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "sluice-fair-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "fair: building the servers into %s\n", dir)
	sluiceBin, natsBin, err := buildBinaries(ctx, dir, stderr)
	if err != nil {
		return err
	}
	var sys [2]*server
	for i, s := range []*server{{name: "sluice", bin: sluiceBin}, {name: "nats", bin: natsBin}} {
		if s.log, err = os.Create(fmt.Sprintf("%s/%s.log", dir, s.name)); err != nil {
			return err
		}
		defer s.log.Close()
		if err := s.start(ctx); err != nil {
			return err
		}
		defer s.stop()
		sys[i] = s
	}
	head := header(o, sluiceBin, natsBin)
	for _, l := range head {
		fmt.Fprintf(stderr, "# %s\n", l)
	}
	var cells []cell
	var all []bench.Result
	for _, r := range o.rows {
		for _, state := range o.states {
			if state == "steady" && r.freshOnly {
				continue
			}
			for _, g := range r.regimes(o.regimes) {
				rs, err := measure(ctx, o, sys, r, state, g, stderr)
				all = append(all, rs[0]...)
				all = append(all, rs[1]...)
				if err != nil {
					return err
				}
				c := cell{row: r, state: state, regime: g, p: bench.ComparePaired(rs[0], rs[1])}
				cells = append(cells, c)
				fmt.Fprintf(stderr, "fair: %s\n", plainLine(c))
			}
		}
	}
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(struct {
			Header  []string       `json:"header"`
			Results []bench.Result `json:"results"`
		}{head, all}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonPath, b, 0o644); err != nil {
			return err
		}
	}
	if o.markdown {
		writeMarkdown(stdout, cells, head, o)
	} else {
		for _, c := range cells {
			fmt.Fprintln(stdout, plainLine(c))
		}
	}
	return ctx.Err()
}

// measure runs o.pairs alternated pairs of row r in one state and regime:
// pair i runs Sluice then NATS when i is even, NATS then Sluice when odd.
// Fresh: the server is restarted before each of its runs; steady: o.fill
// bytes are published to it first.
func measure(ctx context.Context, o options, sys [2]*server, r row, state string, g regime, stderr io.Writer) ([2][]bench.Result, error) {
	var rs [2][]bench.Result
	name, cfg, err := r.config(g, o.scale)
	if err != nil {
		return rs, err
	}
	for i := range o.pairs {
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		for _, side := range order {
			if err := ctx.Err(); err != nil {
				return rs, err
			}
			s := sys[side]
			if err := s.alive(); err != nil {
				fmt.Fprintf(stderr, "fair: %v; restarting it\n", err)
			}
			if state == "fresh" || s.alive() != nil {
				if err := s.restart(ctx); err != nil {
					return rs, err
				}
			}
			d := s.driver(r, r.loopback)
			if state == "steady" {
				if err := fill(ctx, d, o.fill); err != nil {
					fmt.Fprintf(stderr, "fair: %s fill: %v\n", s.name, err)
				}
			}
			c := cfg
			c.Server = &s.stat
			rctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
			res, err := bench.Run(rctx, d, name, c)
			cancel()
			if err != nil {
				res.Err = err.Error()
				if res.System == "" {
					res.System, res.Scenario, res.Config = d.Name(), name, c
				}
			}
			res.Config.Server, res.Config.Progress = nil, nil
			rs[side] = append(rs[side], res)
			fmt.Fprintf(stderr, "fair: %s %s %s pair %d %s: %s\n", r.key, state, g, i+1, s.name, runLine(res))
			runtime.GC()
		}
	}
	return rs, nil
}

// fillSize is the payload of the steady state's fill; fillChannels the
// channels it spreads over.
const (
	fillSize     = 16 << 10
	fillChannels = 16
)

// fill publishes n bytes to d's server in fillSize messages over
// fillChannels channels and waits until the server has them all (Flush:
// for Sluice an acknowledged publish after them, for NATS a PING).
func fill(ctx context.Context, d bench.Driver, n int64) error {
	if n <= 0 {
		return nil
	}
	cl, err := d.Connect(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	body := make([]byte, fillSize)
	prefix := fmt.Sprintf("fill.%d", time.Now().UnixNano())
	for i := int64(0); i*fillSize < n; i++ {
		if err := cl.Publish(ctx, fmt.Sprintf("%s.%d", prefix, i%fillChannels), body); err != nil {
			return err
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return cl.Flush(fctx)
}

// header describes the machine, the servers and the command.
func header(o options, sluiceBin, natsBin string) []string {
	h := []string{"go: " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		fmt.Sprintf("cpus: %d (%s)", runtime.NumCPU(), cpuModel()),
		"sluice: " + version(sluiceBin, "version") + ", `sluice serve --listen ADDR` (defaults)",
		"nats: " + version(natsBin, "--version") + " (Go module), `nats-server -a HOST -p PORT` (defaults, no JetStream)",
		"command: `go run ./cmd/fair " + strings.Join(o.args, " ") + "` (from bench/peer)"}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		c := strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			c += " (with uncommitted changes)"
		}
		h = append(h, "commit: "+c)
	}
	if o.scale != 1 {
		h = append(h, fmt.Sprintf("counts scaled by %g (--scale)", o.scale))
	}
	return h
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "?"
}
