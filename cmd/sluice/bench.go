package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/engine"
)

const benchDescription = `
Runs load-benchmark scenarios (package bench) against a Sluice server and
prints a table (or JSON with --json). Each SCENARIO may carry its own
settings as NAME/key=value,... (keys: size, count, pubs, subs, channels,
rate, duration, window, conns, pacer), e.g.

  sluice bench pub/size=16 fanout/subs=100 latency/rate=50000 --quick

Scenarios:
%s
By default the server is this binary's 'serve' in a child process, so
its CPU time per message and memory are its own (read from
/proc/PID/task/*/schedstat and /proc/PID/status), and --server-cpus pins
it with taskset. With --server-mode inproc it runs in this process (CPU
then counts the load generator too, from getrusage); with --server
HOST:PORT an external server is measured without CPU or memory figures.

Exit status: 0 when every run completed or ended incomplete (messages
skipped or lost are part of the result, listed in the notes); 1 when a
run failed; 2 for a bad command line.

Every scenario is bounded by --count and --duration; --quick makes a run
take a few seconds, and with no SCENARIO runs the quick suite:
  %s
A live progress bar is drawn on standard error (when it is a terminal)
for runs longer than a second.

This command measures Sluice alone. The same scenarios run against NATS
side by side, with the ratio printed, from the nested module bench/peer:

  cd bench/peer && go run ./cmd/compare --quick`

// benchConfig is the parsed bench command line.
type benchConfig struct {
	base       bench.Config
	quick      bool
	specs      []string
	server     string
	serverMode string
	serverCPUs string
	clientCPUs string
	runs       int
	jsonOut    bool
	progress   string
}

func scenarioList() string {
	var b strings.Builder
	for _, s := range bench.Scenarios {
		fmt.Fprintf(&b, "  %-10s %s\n", s.Name, s.Summary)
	}
	return b.String()
}

func parseBench(std stdio, args []string) (benchConfig, int, bool) {
	cfg := benchConfig{serverMode: "proc", runs: 1, progress: "auto"}
	fs := newFlagSet("bench", "SCENARIO[/key=value,...] ... [FLAGS]", fmt.Sprintf(benchDescription, scenarioList(), strings.Join(bench.QuickSuite, " ")))
	bench.AddFlags(fs, &cfg.base, &cfg.quick)
	fs.StringVar(&cfg.server, "server", "", "measure the running server at `HOST:PORT` instead of starting one")
	fs.StringVar(&cfg.serverMode, "server-mode", cfg.serverMode, "how to start the server: `proc` (child process) or inproc")
	fs.StringVar(&cfg.serverCPUs, "server-cpus", "", "pin the child-process server to CPU `LIST` (taskset -c), e.g. 0")
	fs.StringVar(&cfg.clientCPUs, "client-cpus", "", "pin this load generator to CPU `LIST`, e.g. 1")
	fs.IntVar(&cfg.runs, "runs", cfg.runs, "runs of each scenario, `N`")
	fs.BoolVar(&cfg.jsonOut, "json", false, "print the results as a JSON array")
	fs.StringVar(&cfg.progress, "progress", cfg.progress, "progress bar on standard error: `auto`, on or off")
	pos, code, done := parseCommandLine(fs, std, args)
	if done {
		return cfg, code, true
	}
	if len(pos) == 0 && cfg.quick {
		pos = bench.QuickSuite
	}
	cfg.specs = pos
	var err error
	switch {
	case len(pos) == 0:
		err = errors.New("missing SCENARIO (or --quick for the quick suite)")
	case cfg.serverMode != "proc" && cfg.serverMode != "inproc":
		err = fmt.Errorf("--server-mode must be proc or inproc, got %q", cfg.serverMode)
	case cfg.serverCPUs != "" && (cfg.server != "" || cfg.serverMode != "proc"):
		err = errors.New("--server-cpus needs a child-process server (--server-mode proc, no --server)")
	case cfg.runs < 1:
		err = fmt.Errorf("--runs must be at least 1, got %d", cfg.runs)
	case cfg.progress != "auto" && cfg.progress != "on" && cfg.progress != "off":
		err = fmt.Errorf("--progress must be auto, on or off, got %q", cfg.progress)
	}
	for _, l := range []string{cfg.serverCPUs, cfg.clientCPUs} {
		if err == nil && l != "" {
			_, err = bench.ParseCPUList(l)
		}
	}
	for _, s := range pos {
		if err != nil {
			break
		}
		err = checkSpec(s, cfg)
	}
	if err != nil {
		return cfg, usageError(fs, std, err), true
	}
	return cfg, 0, false
}

// checkSpec validates one scenario spec with the command line's defaults.
func checkSpec(spec string, cfg benchConfig) error {
	name, c, err := bench.ParseSpec(spec, cfg.effectiveBase())
	if err != nil {
		return err
	}
	sc, _ := bench.Lookup(name)
	_, err = sc.Normalize(c)
	return err
}

func (cfg benchConfig) effectiveBase() bench.Config {
	if cfg.quick {
		return bench.Quick(cfg.base)
	}
	return cfg.base
}

func runBench(ctx context.Context, std stdio, args []string) int {
	cfg, code, done := parseBench(std, args)
	if done {
		return code
	}
	if cfg.clientCPUs != "" {
		if err := bench.PinSelf(cfg.clientCPUs); err != nil {
			fmt.Fprintf(std.err, "sluice bench: %v\n", err)
			return exitFail
		}
	}
	if _, err := bench.RaiseFileLimit(); err != nil {
		fmt.Fprintf(std.err, "sluice bench: %v\n", err)
	}
	addr, stat, stop, err := startBenchServer(ctx, cfg, std.err)
	if err != nil {
		fmt.Fprintf(std.err, "sluice bench: %v\n", err)
		return exitFail
	}
	defer stop()
	showBar := cfg.progress == "on" || (cfg.progress == "auto" && isTerminal(std.err))
	var results []bench.Result
	failed := false
	for _, spec := range cfg.specs {
		name, c, _ := bench.ParseSpec(spec, cfg.effectiveBase())
		for i := 0; i < cfg.runs && ctx.Err() == nil; i++ {
			r, err := benchOnce(ctx, addr, stat, name, c, showBar, std.err)
			if err != nil && !errors.Is(err, bench.ErrIncomplete) {
				failed = true // an incomplete run (e.g. slow-consumer gaps) is a result, not a failure
			}
			results = append(results, r)
		}
	}
	if cfg.jsonOut {
		err = bench.WriteJSON(std.out, results)
	} else {
		err = bench.WriteTable(std.out, results)
		if stat != nil && err == nil {
			fmt.Fprintf(std.out, "server cpu/msg from %s\n", stat.Source())
		}
		fmt.Fprintln(std.out, "Side by side with NATS: cd bench/peer && go run ./cmd/compare "+strings.Join(cfg.specs, " "))
	}
	if err != nil {
		fmt.Fprintf(std.err, "sluice bench: %v\n", err)
		return exitFail
	}
	if failed || ctx.Err() != nil {
		return exitFail
	}
	return exitOK
}

// benchOnce runs one scenario; an error is also recorded in the Result.
func benchOnce(ctx context.Context, addr string, stat *bench.ProcStat, name string, c bench.Config, showBar bool, stderr io.Writer) (bench.Result, error) {
	d := &bench.SluiceDriver{Addr: addr, Window: max(c.Window, 4096)}
	if name == "idle" && c.Conns > 20_000 {
		d.Dial = bench.LoopbackDialer(1 + c.Conns/20_000)
	}
	c.Server = stat
	c.Progress = &bench.Progress{}
	c.Progress.SetLabel(name)
	stop := func() {}
	if showBar {
		stop = bench.ShowProgress(stderr, c.Progress, time.Second, 200*time.Millisecond)
	}
	r, err := bench.Run(ctx, d, name, c)
	stop()
	if err != nil {
		r.Err = err.Error()
		if r.Scenario == "" {
			r.System, r.Scenario, r.Config = d.Name(), name, c
		}
	}
	return r, err
}

// startBenchServer returns the address to measure, the server's ProcStat
// (nil for an external server) and how to stop it.
func startBenchServer(ctx context.Context, cfg benchConfig, stderr io.Writer) (string, *bench.ProcStat, func(), error) {
	if cfg.server != "" {
		return cfg.server, nil, func() {}, nil
	}
	addr, err := bench.FreePort()
	if err != nil {
		return "", nil, nil, err
	}
	if cfg.serverMode == "inproc" {
		opts := engine.DefaultOptions()
		opts.Listen = addr
		opts.MaxConnsPerAddr = 0 // every load generator connection comes from 127.0.0.1
		opts.Logger = slog.New(slog.DiscardHandler)
		srv, err := engine.Start(opts)
		if err != nil {
			return "", nil, nil, err
		}
		return addr, &bench.ProcStat{}, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", nil, nil, err
	}
	sp, err := bench.StartServerProc(ctx, []string{self, "serve", "--listen", addr, "--log-level", "warn", "--max-conns-per-addr", "0"}, addr, cfg.serverCPUs, stderr)
	if err != nil {
		return "", nil, nil, err
	}
	st := sp.Stat()
	return addr, &st, sp.Stop, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
