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
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/bench/internal/benchcmd"
	"github.com/sluice-rtm/sluice/bench/peer"
	"github.com/sluice-rtm/sluice/engine"
)

func main() { benchcmd.Main(run) }

// options is the parsed command line.
type options struct {
	// --runs, --server-cpus, --client-cpus, --cpuprofile (with --serve-*:
	// the server's profile)
	benchcmd.Flags

	base        bench.Config
	quick       bool
	serverMode  string
	sluiceAddr  string
	natsURL     string
	natsBin     string
	jsonOut     bool
	markdown    bool
	progress    string
	only        string
	serveSluice string // hidden: run a Sluice server on this address
	serveNATS   string // hidden: run an embedded nats-server on this address
	serveRelay  string // hidden: run the raw byte relay on this address
	serveBusy   int    // hidden: spin this many threads until SIGTERM
	sluiceProf  string // write the Sluice server's CPU profile here
	specs       []string
	args        []string // the command line, for reports
}

const usageText = `Usage: go run ./cmd/compare [FLAGS] [SCENARIO[/key=value,...] ...]

Runs each scenario against Sluice and NATS alternately (--runs times each,
ABBA order), then prints every run and, per scenario, the median of each
system and the ratio Sluice/NATS. Without SCENARIO it runs the quick suite
(--quick) or the full suite.

Scenarios: %s
Spec keys: size, count, pubs, subs, channels, rate, duration, window, conns, pacer,
busy (true: a CPU load beside the run, one busy thread per core at nice 0, in a
process of its own), and, for this tool, peer (nats, the default, or relay: a
raw byte relay that copies publisher bytes to subscribers without parsing) and
target (the ratio the summary checks; lower-is-better units must be at or
below it). E.g. fanout/size=128,subs=100,target=3; pubsub/size=1024,peer=relay.

Every table reports lost deliveries (published but not delivered, including
GAP-announced ones) and the 1-minute load average over the runs. The default
suite (--quick) is the shapes of issue 16 at full counts (1M x 128 B, 500k x
1 KiB, 60k x 16 KiB), with their targets.

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
	o.Register(fs, 3, "each scenario per system")
	fs.StringVar(&o.serverMode, "server", "proc", "where the servers run: `proc` (child processes) or inproc (this process)")
	fs.IntVar(&sluiceS2, "sluice-s2", 0, "Sluice clients' S2 threshold in `BYTES` (client.WithCompression; 0: the SDK's default, off; -1: off too; e.g. 512 turns it on)")
	fs.BoolVar(&sluiceNoAck, "sluice-noack", true, "Sluice's fire-and-forget publishers (pub, pubsub, fanout, nm, latency) use PublishNoAck, like NATS core's Publish; false: pipelined acknowledged publishes")
	fs.StringVar(&o.sluiceAddr, "sluice-addr", "", "use the Sluice server at `HOST:PORT` instead of starting one")
	fs.StringVar(&o.natsURL, "nats-url", "", "use the NATS server at `URL` (JetStream enabled) instead of starting one")
	fs.StringVar(&o.natsBin, "nats-bin", "", "start this nats-server `BINARY` as a child process (e.g. /usr/sbin/nats-server)")
	fs.BoolVar(&o.jsonOut, "json", false, "print results as JSON")
	fs.BoolVar(&o.markdown, "markdown", false, "also print one Markdown table per scenario (for BENCHMARKS.md)")
	fs.StringVar(&o.progress, "progress", "auto", "progress bar on stderr: `auto` (when a terminal), on, off")
	fs.StringVar(&o.only, "only", "", "run one side only: `sluice` or nats")
	fs.StringVar(&o.sluiceProf, "sluice-cpuprofile", "", "write the Sluice server's CPU profile to `FILE` (go tool pprof)")
	fs.StringVar(&o.serveSluice, "serve-sluice", "", "internal: run a Sluice server on `ADDR` until SIGTERM")
	fs.StringVar(&o.serveNATS, "serve-nats", "", "internal: run a nats-server on `ADDR` until SIGTERM")
	fs.StringVar(&o.serveRelay, "serve-relay", "", "internal: run the raw byte relay on `ADDR` until SIGTERM")
	fs.IntVar(&o.serveBusy, "serve-busy", 0, "internal: spin `N` threads until SIGTERM")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.specs = fs.Args()
	o.args = args
	if err := o.Check(); err != nil {
		return o, err
	}
	switch {
	case o.serverMode != "proc" && o.serverMode != "inproc":
		return o, fmt.Errorf("--server must be proc or inproc, got %q", o.serverMode)
	case o.only != "" && o.only != "sluice" && o.only != "nats":
		return o, fmt.Errorf("--only must be sluice or nats, got %q", o.only)
	case o.jsonOut && o.markdown:
		return o, errors.New("--json and --markdown exclude each other")
	case o.ServerCPUs != "" && o.serverMode != "proc":
		return o, errors.New("--server-cpus needs --server proc")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	var child func() (func(), error) // a child-process mode
	switch {
	case o.serveSluice != "":
		child = func() (func(), error) { return startSluice(o.serveSluice) }
	case o.serveBusy > 0:
		child = func() (func(), error) {
			stop := bench.Busy(o.serveBusy)
			fmt.Fprintln(stdout, "busy")
			return stop, nil
		}
	case o.serveRelay != "":
		child = func() (func(), error) { return startRelay(o.serveRelay) }
	case o.serveNATS != "":
		child = func() (func(), error) {
			e, err := peer.StartEmbedded(o.serveNATS)
			if err != nil {
				return nil, err
			}
			return e.Shutdown, nil
		}
	}
	return benchcmd.Run(ctx, "compare", stderr, err, &o.Flags, child, func() error { return compare(ctx, o, stdout, stderr) })
}

// startSluice starts an in-process Sluice server with default options.
func startSluice(addr string) (func(), error) {
	opts := engine.DefaultOptions()
	opts.Listen = addr
	opts.MaxConnsPerAddr = 0 // every load generator connection comes from 127.0.0.1
	_, stop, err := benchcmd.StartEngine(opts)
	return stop, err
}

// startRelay starts the raw byte relay (bench.ServeRelay) on addr.
func startRelay(addr string) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = bench.ServeRelay(ln); close(done) }()
	return func() { ln.Close(); <-done }, nil
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

func startSystems(ctx context.Context, o options, wantRelay bool, stderr io.Writer) (sl, nt, rl *system, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, nil, err
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
			sp, err := bench.StartServerProc(ctx, argv(addr), addr, o.ServerCPUs, stderr)
			if err != nil {
				return err
			}
			st := sp.Stat()
			pin := ""
			if o.ServerCPUs != "" {
				pin = ", cpus " + o.ServerCPUs
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
			for _, s := range []*system{sl, nt, rl} {
				s.shutdown()
			}
		}
	}()
	if wantRelay {
		if o.serverMode == "inproc" {
			addr, ferr := bench.FreePort()
			if ferr != nil {
				return nil, nil, nil, ferr
			}
			stop, serr := startRelay(addr)
			if serr != nil {
				return nil, nil, nil, serr
			}
			rl = &system{name: "relay", addr: addr, stat: &bench.ProcStat{}, stop: stop, label: "raw byte relay in-process"}
		} else {
			if rl, err = child("relay", func(addr string) []string { return []string{self, "--serve-relay", addr} }, plain); err != nil {
				return nil, nil, nil, err
			}
			rl.label = "raw byte relay (bench.ServeRelay), " + rl.label
		}
	}
	if o.only != "nats" {
		switch {
		case o.sluiceAddr != "":
			sl = &system{name: "sluice", addr: o.sluiceAddr, label: "external " + o.sluiceAddr}
		case o.serverMode == "inproc":
			addr, ferr := bench.FreePort()
			if ferr != nil {
				return nil, nil, nil, ferr
			}
			stop, serr := startSluice(addr)
			if serr != nil {
				return nil, nil, nil, serr
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
				return nil, nil, nil, err
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
				return nil, nil, nil, derr
			}
			argv := func(addr string) []string {
				host, port, _ := strings.Cut(addr, ":")
				return []string{o.natsBin, "-a", host, "-p", port, "-js", "-sd", dir}
			}
			nt, err = child("nats", argv, natsURL)
			if err != nil {
				_ = os.RemoveAll(dir)
				return nil, nil, nil, err
			}
			nt.cleanup = func() { _ = os.RemoveAll(dir) }
			nt.label = natsBinVersion(o.natsBin) + ", " + nt.label
		case o.serverMode == "inproc":
			e, eerr := peer.StartEmbedded("127.0.0.1:0")
			if eerr != nil {
				return nil, nil, nil, eerr
			}
			nt = &system{name: "nats", addr: e.URL(), stat: &bench.ProcStat{}, stop: e.Shutdown, label: "nats-server " + server.VERSION + " in-process"}
		default:
			if nt, err = child("nats", func(addr string) []string { return []string{self, "--serve-nats", addr} }, natsURL); err != nil {
				return nil, nil, nil, err
			}
			nt.label = "nats-server " + server.VERSION + " (Go module), " + nt.label
		}
	}
	return sl, nt, rl, nil
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

// sluiceS2 is --sluice-s2, the Sluice clients' S2 threshold (bench.SluiceDriver.Compression).
var sluiceS2 int

// driverFor returns the driver of sys for scenario sc, and a cleanup.
func driverFor(ctx context.Context, sys *system, sc bench.Scenario, c bench.Config) (bench.Driver, func(), error) {
	var dial func(ctx context.Context, addr string) (net.Conn, error) // nil: the default dialer
	if sc.Name == "idle" && c.Conns > 20_000 {
		dial = bench.LoopbackDialer(1 + c.Conns/20_000)
	}
	if sys.name == "relay" {
		return &bench.RelayDriver{Addr: sys.addr}, func() {}, nil
	}
	if sys.name == "sluice" {
		return &bench.SluiceDriver{Addr: sys.addr, Window: max(c.Window, 4096), Dial: dial, NoAck: sluiceNoAck, Compression: sluiceS2}, func() {}, nil
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

// job is one scenario of the comparison: Sluice against peer ("nats" or
// "relay"), with the ratio the summary checks (0: none).
type job struct {
	spec   string
	name   string
	sc     bench.Scenario
	cfg    bench.Config
	peer   string
	target float64
}

// defaultSuite is the suite of issue 16 with its targets (Sluice/NATS
// delivered at zero loss; latency p99 at or below; delivered bytes at 1 KiB
// against the raw byte relay).
var defaultSuite = []string{
	"pub/size=16,target=1.5",
	"pubsub/size=128,target=2",
	"pubsub/size=1024,target=1.5",
	"pubsub/size=16384,target=1.2",
	"nm/size=128,pubs=4,subs=4,channels=1,target=2",
	"fanout/size=128,subs=100,target=3",
	"nm/size=128,pubs=1,subs=10000,channels=10000,target=1.5",
	"latency/size=128,rate=50000,target=0.8",
	"latency/size=128,rate=50000,busy=true,target=0.8",
	"pubsub/size=1024,peer=relay,target=0.5",
}

// parseJob splits this tool's keys (peer, target) off spec and parses the
// rest with bench.ParseSpec over base.
func parseJob(spec string, base bench.Config) (job, error) {
	j := job{spec: spec, peer: "nats"}
	name, opts, _ := strings.Cut(spec, "/")
	var rest []string
	if opts != "" {
		for _, kv := range strings.Split(opts, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "peer":
				if v != "nats" && v != "relay" {
					return j, fmt.Errorf("%s: peer must be nats or relay, got %q", spec, v)
				}
				j.peer = v
			case "target":
				t, err := strconv.ParseFloat(v, 64)
				if err != nil || t <= 0 {
					return j, fmt.Errorf("%s: target %q is not a positive number", spec, v)
				}
				j.target = t
			default:
				rest = append(rest, kv)
			}
		}
	}
	bspec := name
	if len(rest) > 0 {
		bspec += "/" + strings.Join(rest, ",")
	}
	var err error
	if j.name, j.cfg, err = bench.ParseSpec(bspec, base); err != nil {
		return j, err
	}
	j.sc, _ = bench.Lookup(j.name)
	if _, err := j.sc.Normalize(j.cfg); err != nil {
		return j, fmt.Errorf("%s: %w", spec, err)
	}
	if j.peer == "relay" && (j.name != "pubsub" && j.name != "pub" || j.sc.Durable) {
		return j, fmt.Errorf("%s: the relay runs pub and pubsub only", spec)
	}
	return j, nil
}

// compare runs the benchmark (the load generator: benchcmd.Run called
// o.Setup).
func compare(ctx context.Context, o options, stdout, stderr io.Writer) error {
	specs := o.specs
	if len(specs) == 0 {
		specs = append(append([]string(nil), defaultSuite...), bench.FullSuite[len(bench.QuickSuite):]...)
		if o.quick {
			specs = defaultSuite
		}
	}
	base := o.base
	if o.quick {
		base = bench.Quick(base)
	}
	var jobs []job
	wantRelay := false
	for _, s := range specs {
		j, err := parseJob(s, base)
		if err != nil {
			return err
		}
		wantRelay = wantRelay || j.peer == "relay"
		jobs = append(jobs, j)
	}
	if o.only != "" {
		wantRelay = false
	}
	sl, nt, rl, err := startSystems(ctx, o, wantRelay, stderr)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range []*system{sl, nt, rl} {
			s.shutdown()
		}
	}()
	machine := machineInfo()
	for _, s := range []*system{sl, nt, rl} {
		if s != nil {
			machine[s.name+"_server"] = s.label
		}
	}
	if o.ClientCPUs != "" {
		machine["load_generator_cpus"] = o.ClientCPUs
	}
	machine["command"] = "compare " + strings.Join(o.args, " ")
	if !o.jsonOut {
		for _, k := range []string{"cpu", "nproc", "go", "sluice_server", "nats_server", "relay_server", "load_generator_cpus", "commit", "command"} {
			if v, ok := machine[k]; ok {
				fmt.Fprintf(stdout, "# %s: %s\n", k, v)
			}
		}
	}
	showBar := o.progress == "on" || (o.progress == "auto" && isTerminal(stderr))
	var all []bench.Result
	var cmps []bench.Comparison
	var sums []summaryRow
	for _, j := range jobs {
		other := nt
		if j.peer == "relay" {
			other = rl
		}
		var rs [2][]bench.Result
		for i := 0; i < o.Runs; i++ {
			order := []*system{sl, other}
			if i%2 == 1 {
				order = []*system{other, sl}
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
				var stopBusy func()
				if j.cfg.Busy {
					if stopBusy, err = startBusy(ctx, stderr); err != nil {
						return err
					}
				}
				r := runOne(ctx, sys, j.sc, j.cfg, showBar, stderr)
				if stopBusy != nil {
					stopBusy()
				}
				all = append(all, r)
				if sys.name == "sluice" {
					rs[0] = append(rs[0], r)
				} else {
					rs[1] = append(rs[1], r)
				}
			}
		}
		if sl != nil && other != nil {
			c := bench.Compare(rs[0], rs[1])
			cmps = append(cmps, c)
			sums = append(sums, summaryRow{c: c, target: j.target, peer: j.peer})
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
		fmt.Fprintf(stdout, "\nMedians of %d alternated run(s); ratio = sluice / peer (nats; acked and replay: nats-js = JetStream memory stream; relay: the raw byte relay):\n", o.Runs)
		if err := bench.WriteComparison(stdout, cmps); err != nil {
			return err
		}
		if o.markdown {
			fmt.Fprintln(stdout)
			writeSummary(stdout, sums, machine, o.Runs)
			fmt.Fprintln(stdout)
			if err := bench.WriteMarkdown(stdout, cmps); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

// startBusy starts the CPU load of a busy=true run: a child process of
// this binary spinning one thread per core, set to nice 0 (it would
// otherwise inherit this process's niceness), and returns once it spins.
func startBusy(ctx context.Context, stderr io.Writer) (stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "--serve-busy", strconv.Itoa(runtime.NumCPU()))
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, 0); err != nil {
		fmt.Fprintf(stderr, "compare: cpu load at the inherited niceness: %v\n", err)
	}
	line := make([]byte, 5)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "busy\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("cpu load did not start: %q %v", line, err)
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}, nil
}

// summaryRow is one line of the summary table.
type summaryRow struct {
	c      bench.Comparison
	target float64
	peer   string
}

// met reports whether the row meets its target with zero loss on Sluice's
// side ("-" without a target).
func (r summaryRow) met() string {
	if r.target == 0 || len(r.c.A) == 0 || len(r.c.B) == 0 {
		return "-"
	}
	ok := r.c.Ratio >= r.target
	if !r.c.HigherBetter {
		ok = r.c.Ratio <= r.target
	}
	switch {
	case ok && r.c.LostA == 0:
		return "yes"
	case ok:
		return "no (loss)"
	}
	return "no"
}

// writeSummary writes the one Markdown table BENCHMARKS.md opens with.
func writeSummary(w io.Writer, rows []summaryRow, machine map[string]string, runs int) {
	fmt.Fprintf(w, "| scenario | peer | sluice | peer value | ratio | target | met | sluice lost | peer lost | load avg (1 min) |\n")
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---:|---|---:|---:|---:|\n")
	for _, r := range rows {
		c := r.c
		target := "-"
		if r.target > 0 {
			op := ">="
			if !c.HigherBetter {
				op = "<="
			}
			target = fmt.Sprintf("%s %.2g", op, r.target)
		}
		unit := c.Unit
		if r.peer == "relay" {
			unit += " (= payload bytes ratio)"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f | %s | %s | %s | %s | %.2f..%.2f |\n", c.Label, c.System[1],
			fmtHeadline(c.ValueA, unit), fmtHeadline(c.ValueB, c.Unit), c.Ratio, target, r.met(),
			lostCell(c.LostA, c.GapA, c.A), lostCell(c.LostB, c.GapB, c.B), c.Load1[0], c.Load1[1])
	}
	fmt.Fprintf(w, "\nMedians of %d alternated runs per side; lost = published but not delivered, summed over the runs (GAP-announced in brackets).\n", runs)
	for _, k := range []string{"cpu", "nproc", "go", "sluice_server", "nats_server", "relay_server", "commit", "command"} {
		if v, ok := machine[k]; ok {
			fmt.Fprintf(w, "%s: %s  \n", k, v)
		}
	}
}

func lostCell(lost, gap int64, rs []bench.Result) string {
	if len(rs) == 0 || rs[0].Expected == 0 {
		return "-"
	}
	if gap > 0 {
		return fmt.Sprintf("%d (%d)", lost, gap)
	}
	return fmt.Sprint(lost)
}

func fmtHeadline(v float64, unit string) string {
	switch {
	case strings.HasPrefix(unit, "p"):
		return fmt.Sprintf("%.0f us %s", v/1e3, unit)
	case strings.HasPrefix(unit, "B/"):
		return fmt.Sprintf("%.0f %s", v, unit)
	}
	return fmt.Sprintf("%.3g %s", v, unit)
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
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m["commit"] = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			m["commit"] += " (with uncommitted changes)"
		}
	}
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
