// Command compare runs Sluice's load-benchmark scenarios (package bench)
// against Sluice and NATS alternately, in one run on one machine, and
// prints each system's numbers and the ratio Sluice/NATS.
//
//	cd bench/peer && go run ./cmd/compare --quick
//	cd bench/peer && go run ./cmd/compare --runs 3 pub/size=16 fanout/subs=100
//
// By default both servers run as child processes of this binary (so their
// CPU time and memory are their own and --server-cpus can pin them); NATS
// is the nats-server Go module this module requires (v2.15.2), or any
// nats-server binary with --nats-bin (e.g. Debian's: see debian-nats.sh),
// or an external server with --nats-url. Scenarios that need stored,
// acknowledged messages (ack-sync, ack-async, replay) run on NATS JetStream
// with a memory stream; the others on NATS core.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/bench/peer"
	"github.com/sluice-rtm/sluice/engine"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options is the parsed command line.
type options struct {
	base        bench.Config
	quick       bool
	runs        int
	serverMode  string
	sluiceAddr  string
	natsURL     string
	natsBin     string
	serverCPUs  string
	clientCPUs  string
	jsonOut     bool
	markdown    bool
	progress    string
	only        string
	serveSluice string // hidden: run a Sluice server on this address
	serveNATS   string // hidden: run an embedded nats-server on this address
	cpuprofile  string // with --serve-*: write the server's CPU profile here
	sluiceProf  string // write the Sluice server's CPU profile here
	specs       []string
}

const usageText = `Usage: go run ./cmd/compare [FLAGS] [SCENARIO[/key=value,...] ...]

Runs each scenario against Sluice and NATS alternately (--runs times each,
ABBA order), then prints every run and, per scenario, the median of each
system and the ratio Sluice/NATS. Without SCENARIO it runs the quick suite
(--quick) or the full suite.

Scenarios: %s
Spec keys: size, count, pubs, subs, channels, rate, duration, window, conns, pacer
(e.g. fanout/size=128,subs=100).

Flags (-flag and --flag are the same):
`

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		names := make([]string, len(bench.Scenarios))
		for i, s := range bench.Scenarios {
			names[i] = s.Name
		}
		fmt.Fprintf(stderr, usageText, strings.Join(names, ", "))
		fs.PrintDefaults()
	}
	bench.AddFlags(fs, &o.base, &o.quick)
	fs.IntVar(&o.runs, "runs", 3, "runs of each scenario per system, alternated, `N`")
	fs.StringVar(&o.serverMode, "server", "proc", "where the servers run: `proc` (child processes) or inproc (this process)")
	fs.BoolVar(&sluiceNoAck, "sluice-noack", false, "Sluice's fire-and-forget publishers (pub, pubsub, fanout, nm, latency) use PublishNoAck, like NATS core, instead of pipelined acknowledged publishes")
	fs.StringVar(&o.sluiceAddr, "sluice-addr", "", "use the Sluice server at `HOST:PORT` instead of starting one")
	fs.StringVar(&o.natsURL, "nats-url", "", "use the NATS server at `URL` (JetStream enabled) instead of starting one")
	fs.StringVar(&o.natsBin, "nats-bin", "", "start this nats-server `BINARY` as a child process (e.g. /usr/sbin/nats-server)")
	fs.StringVar(&o.serverCPUs, "server-cpus", "", "pin child-process servers to CPU `LIST` (taskset -c), e.g. 0")
	fs.StringVar(&o.clientCPUs, "client-cpus", "", "pin this load generator to CPU `LIST`, e.g. 1")
	fs.BoolVar(&o.jsonOut, "json", false, "print results as JSON")
	fs.BoolVar(&o.markdown, "markdown", false, "also print one Markdown table per scenario (for BENCHMARKS.md)")
	fs.StringVar(&o.progress, "progress", "auto", "progress bar on stderr: `auto` (when a terminal), on, off")
	fs.StringVar(&o.only, "only", "", "run one side only: `sluice` or nats")
	fs.StringVar(&o.sluiceProf, "sluice-cpuprofile", "", "write the Sluice server's CPU profile to `FILE` (go tool pprof)")
	fs.StringVar(&o.serveSluice, "serve-sluice", "", "internal: run a Sluice server on `ADDR` until SIGTERM")
	fs.StringVar(&o.serveNATS, "serve-nats", "", "internal: run a nats-server on `ADDR` until SIGTERM")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write this process's CPU profile (the load generator; with --serve-*, the server) to `FILE`")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.specs = fs.Args()
	switch {
	case o.runs < 1:
		return o, errors.New("--runs must be at least 1")
	case o.serverMode != "proc" && o.serverMode != "inproc":
		return o, fmt.Errorf("--server must be proc or inproc, got %q", o.serverMode)
	case o.only != "" && o.only != "sluice" && o.only != "nats":
		return o, fmt.Errorf("--only must be sluice or nats, got %q", o.only)
	case o.jsonOut && o.markdown:
		return o, errors.New("--json and --markdown exclude each other")
	case o.serverCPUs != "" && o.serverMode != "proc":
		return o, errors.New("--server-cpus needs --server proc")
	}
	for _, l := range []string{o.serverCPUs, o.clientCPUs} {
		if l != "" {
			if _, err := bench.ParseCPUList(l); err != nil {
				return o, err
			}
		}
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "compare: %v\n", err)
		return 2
	}
	switch {
	case o.serveSluice != "":
		return serve(ctx, stderr, o.cpuprofile, func() (func(), error) { return startSluice(o.serveSluice) })
	case o.serveNATS != "":
		return serve(ctx, stderr, o.cpuprofile, func() (func(), error) {
			e, err := peer.StartEmbedded(o.serveNATS)
			if err != nil {
				return nil, err
			}
			return e.Shutdown, nil
		})
	}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			fmt.Fprintf(stderr, "compare: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "compare: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if err := compare(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "compare: %v\n", err)
		return 1
	}
	return 0
}

// startSluice starts an in-process Sluice server with default options.
func startSluice(addr string) (func(), error) {
	opts := engine.DefaultOptions()
	opts.Listen = addr
	opts.Logger = slog.New(slog.DiscardHandler)
	srv, err := engine.Start(opts)
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// serve is the child-process mode: run a server until ctx ends.
func serve(ctx context.Context, stderr io.Writer, profile string, start func() (func(), error)) int {
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			fmt.Fprintf(stderr, "compare: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "compare: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	stop, err := start()
	if err != nil {
		fmt.Fprintf(stderr, "compare: %v\n", err)
		return 1
	}
	<-ctx.Done()
	stop()
	return 0
}

// system is one side of the comparison.
type system struct {
	name  string
	addr  string // sluice: host:port; nats: URL
	stat  *bench.ProcStat
	stop  func()
	label string // how the server runs, for the header
	// restart, for a child process, replaces it with a fresh one (on a new
	// port), so that memory measurements start from a clean process.
	restart func() error
	cleanup func() // after the last stop, if set
}

// shutdown stops the server (if this harness started it) and removes what
// it left. A nil system is allowed.
func (s *system) shutdown() {
	if s == nil {
		return
	}
	if s.stop != nil {
		s.stop()
	}
	if s.cleanup != nil {
		s.cleanup()
	}
}

func startSystems(ctx context.Context, o options, stderr io.Writer) (sl, nt *system, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	// child starts a server as a child process; argv builds its command
	// line for an address, url its client address.
	child := func(name string, argv func(addr string) []string, url func(addr string) string) (*system, error) {
		sys := &system{name: name}
		start := func() error {
			addr, err := bench.FreePort()
			if err != nil {
				return err
			}
			sp, err := bench.StartServerProc(ctx, argv(addr), addr, o.serverCPUs, stderr)
			if err != nil {
				return err
			}
			st := sp.Stat()
			pin := ""
			if o.serverCPUs != "" {
				pin = ", cpus " + o.serverCPUs
			}
			sys.addr, sys.stat, sys.stop = url(addr), &st, sp.Stop
			sys.label = fmt.Sprintf("child process pid %d%s", st.Pid, pin)
			return nil
		}
		sys.restart = func() error {
			sys.stop()
			return start()
		}
		return sys, start()
	}
	plain := func(addr string) string { return addr }
	natsURL := func(addr string) string { return "nats://" + addr }
	defer func() {
		if err != nil {
			for _, s := range []*system{sl, nt} {
				s.shutdown()
			}
		}
	}()
	if o.only != "nats" {
		switch {
		case o.sluiceAddr != "":
			sl = &system{name: "sluice", addr: o.sluiceAddr, label: "external " + o.sluiceAddr}
		case o.serverMode == "inproc":
			addr, ferr := bench.FreePort()
			if ferr != nil {
				return nil, nil, ferr
			}
			stop, serr := startSluice(addr)
			if serr != nil {
				return nil, nil, serr
			}
			sl = &system{name: "sluice", addr: addr, stat: &bench.ProcStat{}, stop: stop, label: "in-process"}
		default:
			argv := func(addr string) []string {
				a := []string{self, "--serve-sluice", addr}
				if o.sluiceProf != "" {
					a = append(a, "--cpuprofile", o.sluiceProf)
				}
				return a
			}
			if sl, err = child("sluice", argv, plain); err != nil {
				return nil, nil, err
			}
		}
	}
	if o.only != "sluice" {
		switch {
		case o.natsURL != "":
			nt = &system{name: "nats", addr: o.natsURL, label: "external " + o.natsURL}
		case o.natsBin != "":
			dir, derr := os.MkdirTemp("", "sluice-bench-nats-")
			if derr != nil {
				return nil, nil, derr
			}
			argv := func(addr string) []string {
				host, port, _ := strings.Cut(addr, ":")
				return []string{o.natsBin, "-a", host, "-p", port, "-js", "-sd", dir}
			}
			nt, err = child("nats", argv, natsURL)
			if err != nil {
				_ = os.RemoveAll(dir)
				return nil, nil, err
			}
			nt.cleanup = func() { _ = os.RemoveAll(dir) }
			nt.label = natsBinVersion(o.natsBin) + ", " + nt.label
		case o.serverMode == "inproc":
			e, eerr := peer.StartEmbedded("127.0.0.1:0")
			if eerr != nil {
				return nil, nil, eerr
			}
			nt = &system{name: "nats", addr: e.URL(), stat: &bench.ProcStat{}, stop: e.Shutdown, label: "nats-server " + server.VERSION + " in-process"}
		default:
			if nt, err = child("nats", func(addr string) []string { return []string{self, "--serve-nats", addr} }, natsURL); err != nil {
				return nil, nil, err
			}
			nt.label = "nats-server " + server.VERSION + " (Go module), " + nt.label
		}
	}
	return sl, nt, nil
}

func natsBinVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return bin
	}
	return strings.TrimSpace(string(out))
}

// sluiceNoAck is --sluice-noack (set once by flag parsing).
var sluiceNoAck bool

// driverFor returns the driver of sys for scenario sc, and a cleanup.
func driverFor(ctx context.Context, sys *system, sc bench.Scenario, c bench.Config) (bench.Driver, func(), error) {
	var dial func(ctx context.Context, addr string) (net.Conn, error) // nil: the default dialer
	if sc.Name == "idle" && c.Conns > 20_000 {
		dial = bench.LoopbackDialer(1 + c.Conns/20_000)
	}
	if sys.name == "sluice" {
		return &bench.SluiceDriver{Addr: sys.addr, Window: max(c.Window, 4096), Dial: dial, NoAck: sluiceNoAck}, func() {}, nil
	}
	if !sc.Durable {
		return &peer.NATSDriver{URL: sys.addr, Dial: dial}, func() {}, nil
	}
	js, err := peer.NewJetStreamDriver(ctx, sys.addr)
	if err != nil {
		return nil, nil, err
	}
	return js, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = js.Close(cctx)
	}, nil
}

// report is the JSON output.
type report struct {
	Machine     map[string]string  `json:"machine"`
	Results     []bench.Result     `json:"results"`
	Comparisons []bench.Comparison `json:"comparisons"`
}

func compare(ctx context.Context, o options, stdout, stderr io.Writer) error {
	if o.clientCPUs != "" {
		if err := bench.PinSelf(o.clientCPUs); err != nil {
			return err
		}
	}
	if _, err := bench.RaiseFileLimit(); err != nil {
		return err
	}
	specs := o.specs
	if len(specs) == 0 {
		specs = bench.FullSuite
		if o.quick {
			specs = bench.QuickSuite
		}
	}
	base := o.base
	if o.quick {
		base = bench.Quick(base)
	}
	type job struct {
		name string
		sc   bench.Scenario
		cfg  bench.Config
	}
	var jobs []job
	for _, s := range specs {
		name, c, err := bench.ParseSpec(s, base)
		if err != nil {
			return err
		}
		sc, _ := bench.Lookup(name)
		if _, err := sc.Normalize(c); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		jobs = append(jobs, job{name, sc, c})
	}
	sl, nt, err := startSystems(ctx, o, stderr)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range []*system{sl, nt} {
			s.shutdown()
		}
	}()
	machine := machineInfo()
	for _, s := range []*system{sl, nt} {
		if s != nil {
			machine[s.name+"_server"] = s.label
		}
	}
	if o.clientCPUs != "" {
		machine["load_generator_cpus"] = o.clientCPUs
	}
	if !o.jsonOut {
		for _, k := range []string{"cpu", "nproc", "go", "sluice_server", "nats_server", "load_generator_cpus"} {
			if v, ok := machine[k]; ok {
				fmt.Fprintf(stdout, "# %s: %s\n", k, v)
			}
		}
	}
	showBar := o.progress == "on" || (o.progress == "auto" && isTerminal(stderr))
	var all []bench.Result
	var cmps []bench.Comparison
	for _, j := range jobs {
		var rs [2][]bench.Result
		for i := 0; i < o.runs; i++ {
			order := []*system{sl, nt}
			if i%2 == 1 {
				order = []*system{nt, sl}
			}
			for _, sys := range order {
				if sys == nil || ctx.Err() != nil {
					continue
				}
				if j.sc.Name == "idle" && sys.restart != nil {
					// Memory per connection is an RSS delta: start from a
					// fresh server, not one grown by earlier runs.
					if err := sys.restart(); err != nil {
						return fmt.Errorf("restart %s: %w", sys.name, err)
					}
				}
				r := runOne(ctx, sys, j.sc, j.cfg, showBar, stderr)
				all = append(all, r)
				if sys.name == "sluice" {
					rs[0] = append(rs[0], r)
				} else {
					rs[1] = append(rs[1], r)
				}
			}
		}
		if sl != nil && nt != nil {
			cmps = append(cmps, bench.Compare(rs[0], rs[1]))
		}
	}
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report{Machine: machine, Results: all, Comparisons: cmps})
	}
	fmt.Fprintln(stdout)
	if err := bench.WriteTable(stdout, all); err != nil {
		return err
	}
	if len(cmps) > 0 {
		fmt.Fprintf(stdout, "\nMedians of %d alternated run(s); ratio = sluice / nats (acked and replay: nats-js = JetStream memory stream):\n", o.runs)
		if err := bench.WriteComparison(stdout, cmps); err != nil {
			return err
		}
		if o.markdown {
			fmt.Fprintln(stdout)
			if err := bench.WriteMarkdown(stdout, cmps); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

func runOne(ctx context.Context, sys *system, sc bench.Scenario, c bench.Config, showBar bool, stderr io.Writer) bench.Result {
	d, cleanup, err := driverFor(ctx, sys, sc, c)
	if err != nil {
		return bench.Result{System: sys.name, Scenario: sc.Name, Config: c, Err: err.Error()}
	}
	defer cleanup()
	c.Server = sys.stat
	c.Progress = &bench.Progress{}
	c.Progress.SetLabel(d.Name() + " " + sc.Name)
	stop := func() {}
	if showBar {
		stop = bench.ShowProgress(stderr, c.Progress, time.Second, 200*time.Millisecond)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	r, err := bench.Run(rctx, d, sc.Name, c)
	cancel()
	stop()
	if err != nil {
		r.Err = err.Error()
		if r.System == "" {
			r.System, r.Scenario, r.Config = d.Name(), sc.Name, c
		}
	}
	runtime.GC() // start the next run from a clean heap
	return r
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// machineInfo describes the machine for the report header.
func machineInfo() map[string]string {
	m := map[string]string{"go": runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		"nproc": fmt.Sprint(runtime.NumCPU())}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				m["cpu"] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return m
}
