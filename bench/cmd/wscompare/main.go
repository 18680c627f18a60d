// Command wscompare measures Sluice's WebSocket gateway against its raw
// TCP listener in one run on one server: the same scenarios (package
// bench), the same Go SDK, once over TCP and once over WebSocket (the SDK
// over client/wsdial), alternated ABBA, and prints each side's numbers and
// the ratio WebSocket/TCP.
//
//	go run ./bench/cmd/wscompare --runs 3
//	go run ./bench/cmd/wscompare --quick fanout/size=128,subs=100
//
// The server is this binary in a child process (--serve), listening on
// both, so its CPU time per message is its own.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/bench/internal/benchcmd"
	"github.com/sluice-rtm/sluice/client/wsdial"
	"github.com/sluice-rtm/sluice/engine"
)

// defaultSpecs: 128-byte messages, 1:1 and 1:100, throughput and latency.
var defaultSpecs = []string{
	"pubsub/size=128",
	"fanout/size=128,subs=100",
	"latency/size=128,rate=20000",
	"latency/size=128,subs=100,rate=1000",
}

func main() { benchcmd.Main(run) }

type options struct {
	benchcmd.Flags // --runs, --server-cpus, --client-cpus, --cpuprofile

	base       bench.Config
	quick      bool
	markdown   bool
	serve      string // internal: run a server with its client listener here
	serveWS    string // and its WebSocket listener here
	serverProf string // write the server's CPU profile here
	specs      []string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	var child func() (func(), error)
	if o.serve != "" {
		child = func() (func(), error) { return serve(o.serve, o.serveWS) }
	}
	return benchcmd.Run(ctx, "wscompare", stderr, err, &o.Flags, child, func() error { return compare(ctx, o, stdout, stderr) })
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("wscompare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bench.AddFlags(fs, &o.base, &o.quick)
	o.Register(fs, 3, "each scenario per transport")
	fs.BoolVar(&o.markdown, "markdown", false, "also print Markdown tables (for BENCHMARKS.md)")
	fs.StringVar(&o.serve, "serve", "", "internal: run a server on `ADDR` until SIGTERM")
	fs.StringVar(&o.serveWS, "serve-ws", "", "internal: its WebSocket listener `ADDR`")
	fs.StringVar(&o.serverProf, "server-cpuprofile", "", "write the server's CPU profile to `FILE` (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.specs = fs.Args()
	return o, o.Check()
}

// serve starts the child-process server: the client listener on addr,
// the WebSocket listener on wsAddr.
func serve(addr, wsAddr string) (stop func(), err error) {
	opts := engine.DefaultOptions()
	opts.Listen, opts.WSListen = addr, wsAddr
	_, stop, err = benchcmd.StartEngine(opts)
	return stop, err
}

// waitListening dials addr until it accepts (the child opens its
// WebSocket listener just after the client one), for at most 20 s.
func waitListening(ctx context.Context, addr string) error {
	deadline := time.Now().Add(20 * time.Second)
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not accept: %w", addr, err)
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// compare runs the benchmark (the load generator: benchcmd.Run called
// o.Setup).
func compare(ctx context.Context, o options, stdout, stderr io.Writer) error {
	specs := o.specs
	if len(specs) == 0 {
		specs = defaultSpecs
	}
	base := o.base
	if o.quick {
		base = bench.Quick(base)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	addr, err := bench.FreePort()
	if err != nil {
		return err
	}
	wsAddr, err := bench.FreePort()
	if err != nil {
		return err
	}
	argv := []string{self, "--serve", addr, "--serve-ws", wsAddr}
	if o.serverProf != "" {
		argv = append(argv, "--cpuprofile", o.serverProf)
	}
	sp, err := bench.StartServerProc(ctx, argv, addr, o.ServerCPUs, stderr)
	if err != nil {
		return err
	}
	defer sp.Stop()
	if err := waitListening(ctx, wsAddr); err != nil {
		return err
	}
	st := sp.Stat()
	fmt.Fprintf(stdout, "# go: %s %s/%s, nproc %d; server: child process pid %d (TCP %s, WebSocket %s)\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), st.Pid, addr, wsAddr)
	tcp := &bench.SluiceDriver{Addr: addr}
	ws := &bench.SluiceDriver{Addr: "ws://" + wsAddr + "/", Dial: wsdial.Dialer(wsdial.Options{})}
	var all []bench.Result
	var cmps []bench.Comparison
	for _, s := range specs {
		name, c, err := bench.ParseSpec(s, base)
		if err != nil {
			return err
		}
		c.Server = &st
		var rs [2][]bench.Result // [0] WebSocket, [1] TCP
		for i := 0; i < o.Runs && ctx.Err() == nil; i++ {
			order := []int{0, 1}
			if i%2 == 1 {
				order = []int{1, 0}
			}
			for _, side := range order {
				d, label := ws, "websocket"
				if side == 1 {
					d, label = tcp, "tcp"
				}
				rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
				r, err := bench.Run(rctx, d, name, c)
				cancel()
				if err != nil {
					r.Err = err.Error()
					if r.Scenario == "" {
						r.Scenario, r.Config = name, c
					}
				}
				r.System = label
				all = append(all, r)
				rs[side] = append(rs[side], r)
				runtime.GC()
			}
		}
		cmps = append(cmps, bench.Compare(rs[0], rs[1]))
	}
	fmt.Fprintln(stdout)
	if err := bench.WriteTable(stdout, all); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nMedians of %d alternated run(s); ratio = websocket / tcp:\n", o.Runs)
	if err := bench.WriteComparison(stdout, cmps); err != nil {
		return err
	}
	if o.markdown {
		fmt.Fprintln(stdout)
		if err := bench.WriteMarkdown(stdout, cmps); err != nil {
			return err
		}
	}
	return ctx.Err()
}
