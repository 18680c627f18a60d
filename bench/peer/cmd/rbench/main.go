// Command rbench measures replicated, acknowledged publishing: a 3-node
// Sluice cluster (channel rules give replicas 1, 2 and 3 to the prefixes
// rb.r1., rb.r2., rb.r3.) against a 3-node NATS cluster with a JetStream
// stream of 3 replicas on memory storage. Every server is a child process
// of this command (the same binary, hidden --serve-* modes), on loopback,
// ephemeral ports; the setups run alternately (ABBA) in one invocation.
//
// Each throughput row: publishers on every node, PublishAsync with acks
// within --window, 128 B payloads, over --channels channels, each channel
// with one live subscriber on another node; acknowledged msg/s, and what
// the subscribers got: delivered, lost (acknowledged but never delivered),
// duplicates, out of order, and the load average. Latency rows: the same at
// a fixed total --rate with a sleeping pacer, publish (due time) to
// delivery p50/p99, Sluice N = 1 and N = 3.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

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

type options struct {
	runs, pubsPerNode, channels, window, size int
	duration, latDuration                     time.Duration
	rate                                      float64
	setups                                    []string
	latency                                   bool
	profDir                                   string
	// hidden child modes
	serveSluice, serveNATS string
}

const readyLine = "rbench-ready"

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	var setups string
	fs := flag.NewFlagSet("rbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.runs, "runs", 2, "runs of each setup, alternated ABBA")
	fs.IntVar(&o.pubsPerNode, "pubs", 2, "publisher connections per node")
	fs.IntVar(&o.channels, "channels", 6, "channels (subjects), one live subscriber each")
	fs.IntVar(&o.window, "window", 1024, "acknowledged publishes in flight per publisher")
	fs.IntVar(&o.size, "size", 128, "payload bytes (at least 20)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "publishing time of a throughput run")
	fs.DurationVar(&o.latDuration, "lat-duration", 5*time.Second, "publishing time of a latency run")
	fs.Float64Var(&o.rate, "rate", 5000, "latency runs: messages per second over all publishers")
	fs.StringVar(&setups, "setups", "n1,n2,n3,js3", "throughput setups: n1, n2, n3 (Sluice replicas), js3 (JetStream R3)")
	fs.BoolVar(&o.latency, "latency", true, "also run the latency rows (Sluice n1 and n3)")
	fs.StringVar(&o.profDir, "sluice-cpuprofile-dir", "", "each Sluice node writes its CPU profile (whole life) to `DIR`/sluice-NAME.pprof")
	fs.StringVar(&o.serveSluice, "serve-sluice-node", "", "internal: NAME,CLIENT,GOSSIP[,SEED] Sluice cluster node")
	fs.StringVar(&o.serveNATS, "serve-nats-node", "", "internal: NAME,CLIENT,ROUTE,PEERROUTE... nats-server cluster node")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, s := range strings.Split(setups, ",") {
		switch s {
		case "n1", "n2", "n3", "js3":
			o.setups = append(o.setups, s)
		case "":
		default:
			return o, fmt.Errorf("unknown setup %q", s)
		}
	}
	if o.runs < 1 || o.pubsPerNode < 1 || o.channels < 1 || o.window < 1 || o.size < 20 || o.rate <= 0 {
		return o, errors.New("--runs, --pubs, --channels, --window must be >= 1, --size >= 20, --rate > 0")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "rbench: %v\n", err)
		return 2
	}
	switch {
	case o.serveSluice != "":
		err = serveSluice(ctx, o, stdout)
	case o.serveNATS != "":
		err = serveNATS(ctx, o.serveNATS, stdout)
	default:
		err = bench3(ctx, o, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rbench: %v\n", err)
		return 1
	}
	return 0
}

// secretEnv carries the cluster secret to the Sluice children.
const secretEnv = "SLUICE_CLUSTER_SECRET"

// serveSluice runs one Sluice cluster node until ctx ends; it prints
// readyLine once it sees 3 members alive.
func serveSluice(ctx context.Context, o options, stdout io.Writer) error {
	f := strings.Split(o.serveSluice, ",")
	if len(f) < 3 {
		return fmt.Errorf("--serve-sluice-node %q", o.serveSluice)
	}
	if o.profDir != "" {
		pf, err := os.Create(filepath.Join(o.profDir, "sluice-"+f[0]+".pprof"))
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	opts := engine.DefaultOptions()
	opts.Listen, opts.ServerName, opts.Loops = f[1], f[0], 1
	opts.MaxConnsPerAddr = 0
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.ChannelRules = []engine.ChannelRule{{Prefix: "rb.r1.", Replicas: 1}, {Prefix: "rb.r2.", Replicas: 2}, {Prefix: "rb.r3.", Replicas: 3}}
	opts.Cluster = &engine.ClusterOptions{Listen: f[2], Join: f[3:], Secret: os.Getenv(secretEnv), ReportInterval: 250 * time.Millisecond}
	srv, err := engine.Start(opts)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for ready := false; !ready; {
		st, _ := srv.Cluster()
		alive := 0
		for _, m := range st.Members {
			if m.State == "alive" {
				alive++
			}
		}
		if ready = alive == 3; ready {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	fmt.Fprintln(stdout, readyLine)
	<-ctx.Done()
	return nil
}

// serveNATS runs one nats-server cluster node until ctx ends.
func serveNATS(ctx context.Context, spec string, stdout io.Writer) error {
	f := strings.Split(spec, ",")
	if len(f) < 3 {
		return fmt.Errorf("--serve-nats-node %q", spec)
	}
	n, err := peer.StartClusterNode(f[0], f[1], f[2], f[3:])
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, readyLine)
	<-ctx.Done()
	n.Shutdown()
	return nil
}

// readyWatch is a child's output: it signals ready at readyLine.
type readyWatch struct {
	mu    sync.Mutex
	buf   []byte
	ready chan struct{}
	once  sync.Once
	log   io.Writer
}

func (w *readyWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := slices.Index(w.buf, '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if line == readyLine {
			w.once.Do(func() { close(w.ready) })
		} else if w.log != nil {
			fmt.Fprintln(w.log, line)
		}
	}
	if len(w.buf) > 64<<10 {
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

// cluster3 is three child processes.
type cluster3 struct {
	procs []*bench.ServerProc
	addrs []string
}

// stop stops every child at once (each: SIGTERM, killed after 10 s).
func (c *cluster3) stop() {
	var wg sync.WaitGroup
	for _, p := range c.procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop() }()
	}
	wg.Wait()
	c.procs = nil
}

func freePorts(n int) ([]string, error) {
	out := make([]string, n)
	for i := range out {
		a, err := bench.FreePort()
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return out, nil
}

// start3 starts three children whose argv argv(i) builds, waits for each
// one's ready line (bounded by 30 s), and on failure stops every one.
func start3(ctx context.Context, addrs []string, argv func(i int) []string, stderr io.Writer) (c *cluster3, err error) {
	c = &cluster3{addrs: addrs}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	var watches []*readyWatch
	for i := range 3 {
		w := &readyWatch{ready: make(chan struct{}), log: stderr}
		sp, err := bench.StartServerProc(ctx, argv(i), addrs[i], "", w)
		if err != nil {
			return c, err
		}
		c.procs = append(c.procs, sp)
		watches = append(watches, w)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i, w := range watches {
		select {
		case <-w.ready:
		case <-tctx.Done():
			return c, fmt.Errorf("node %d not ready: %w", i, tctx.Err())
		}
	}
	return c, nil
}

func startSluice3(ctx context.Context, o options, stderr io.Writer) (*cluster3, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	clients, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	gossip, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	sec := make([]byte, 32)
	_, _ = rand.Read(sec)
	if err := os.Setenv(secretEnv, hex.EncodeToString(sec)); err != nil {
		return nil, err
	}
	return start3(ctx, clients, func(i int) []string {
		spec := fmt.Sprintf("%c,%s,%s", 'a'+i, clients[i], gossip[i])
		if i > 0 {
			spec += "," + gossip[0]
		}
		a := []string{self, "--serve-sluice-node", spec}
		if o.profDir != "" {
			a = append(a, "--sluice-cpuprofile-dir", o.profDir)
		}
		return a
	}, stderr)
}

func startNATS3(ctx context.Context, stderr io.Writer) (*cluster3, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	clients, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	routes, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	return start3(ctx, clients, func(i int) []string {
		spec := fmt.Sprintf("n%c,%s,%s", 'a'+i, clients[i], routes[i])
		for j := range 3 {
			if j != i {
				spec += ",nats://" + routes[j]
			}
		}
		return []string{self, "--serve-nats-node", spec}
	}, stderr)
}
