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
// duplicates, out of order, the CPU each node and this load generator
// spent, and the load average. Latency rows: the same at a fixed total
// --rate, open loop with package bench's sleeping pacer, publish (due time)
// to delivery p50/p99/p99.9, Sluice N = 1 and N = 3 and JetStream R3.
// JetStream's subscribers read the stream (ordered consumers, --js-sub
// stream), so, like Sluice's, they get a message only once it is
// replicated.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/bench/internal/benchcmd"
	"github.com/sluice-rtm/sluice/bench/peer"
	"github.com/sluice-rtm/sluice/engine"
)

func main() { benchcmd.Main(run) }

type options struct {
	// --runs, --server-cpus (all six nodes), --client-cpus, --cpuprofile
	// (this process; in a --serve-* child, that node's)
	benchcmd.Flags

	pubsPerNode, channels, window, size int
	duration, latDuration               time.Duration
	rate                                float64
	setups, latSetups                   []string
	jsSub                               string
	profDir                             string
	// hidden child modes; a Sluice node's data directory and metadata
	// log address
	serveSluice, serveNATS string
	dataDir, raftListen    string
}

const readyLine = "rbench-ready"

// setupNames are the setups, in the order tables list them.
var setupNames = []string{"n1", "n2", "n3", "js3"}

func parseSetups(flagName, list string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		switch {
		case s == "":
		case slices.Contains(setupNames, s):
			out = append(out, s)
		default:
			return nil, fmt.Errorf("%s: unknown setup %q (n1, n2, n3, js3)", flagName, s)
		}
	}
	return out, nil
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	var setups, latSetups string
	fs := flag.NewFlagSet("rbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.Register(fs, 4, "each setup")
	fs.IntVar(&o.pubsPerNode, "pubs", 2, "publisher connections per node")
	fs.IntVar(&o.channels, "channels", 6, "channels (subjects), one live subscriber each")
	fs.IntVar(&o.window, "window", 1024, "acknowledged publishes in flight per publisher")
	fs.IntVar(&o.size, "size", 128, "payload bytes (at least 20)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "publishing time of a throughput run")
	fs.DurationVar(&o.latDuration, "lat-duration", 5*time.Second, "publishing time of a latency run")
	fs.Float64Var(&o.rate, "rate", 5000, "latency runs: messages per second over all publishers")
	fs.StringVar(&setups, "setups", "n1,n2,n3,js3", "throughput setups: n1, n2, n3 (Sluice replicas), js3 (JetStream R3)")
	fs.StringVar(&latSetups, "lat-setups", "n1,n3,js3", "latency setups (empty: none)")
	fs.StringVar(&o.jsSub, "js-sub", "stream", "JetStream subscribers: `stream` (ordered consumers: a message once the stream holds it) or core (core subscriptions: a message as soon as it is routed, before it is stored)")
	fs.StringVar(&o.profDir, "server-cpuprofile-dir", "", "each node writes its CPU profile (whole life) to `DIR`/sluice-NAME.pprof or nats-NAME.pprof")
	fs.StringVar(&o.serveSluice, "serve-sluice-node", "", "internal: NAME,CLIENT,GOSSIP[,SEED] Sluice cluster node")
	fs.StringVar(&o.serveNATS, "serve-nats-node", "", "internal: NAME,CLIENT,ROUTE,PEERROUTE... nats-server cluster node")
	fs.StringVar(&o.dataDir, "serve-data-dir", "", "internal: the Sluice node's data directory (its metadata log)")
	fs.StringVar(&o.raftListen, "serve-raft-listen", "", "internal: the Sluice node's metadata log address")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.setups, err = parseSetups("--setups", setups); err != nil {
		return o, err
	}
	if o.latSetups, err = parseSetups("--lat-setups", latSetups); err != nil {
		return o, err
	}
	if err := o.Check(); err != nil {
		return o, err
	}
	if o.jsSub != "stream" && o.jsSub != "core" {
		return o, fmt.Errorf("--js-sub must be stream or core, got %q", o.jsSub)
	}
	if o.pubsPerNode < 1 || o.channels < 1 || o.window < 1 || o.size < 20 || o.rate <= 0 {
		return o, errors.New("--pubs, --channels, --window must be >= 1, --size >= 20, --rate > 0")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	var child func() (func(), error)
	switch {
	case o.serveSluice != "":
		child = func() (func(), error) { return serveSluice(ctx, o, stdout) }
	case o.serveNATS != "":
		child = func() (func(), error) { return serveNATS(o.serveNATS, stdout) }
	}
	return benchcmd.Run(ctx, "rbench", stderr, err, &o.Flags, child, func() error { return bench3(ctx, o, stdout, stderr) })
}

// secretEnv carries the cluster secret to the Sluice children: it is set
// in their environment only (bench.StartServerProcEnv), never in this
// process's.
const secretEnv = "SLUICE_CLUSTER_SECRET"

// serveSluice starts one Sluice cluster node (spec NAME,CLIENT,GOSSIP
// [,SEED...]; its metadata log in --serve-data-dir on --serve-raft-listen)
// and prints readyLine once it sees 3 members alive and 3 voters of the
// metadata log with a leader (or returns at once, still running, when ctx
// ends first).
func serveSluice(ctx context.Context, o options, stdout io.Writer) (stop func(), err error) {
	spec := o.serveSluice
	f := strings.Split(spec, ",")
	if len(f) < 3 {
		return nil, fmt.Errorf("--serve-sluice-node %q", spec)
	}
	opts := engine.DefaultOptions()
	opts.Listen, opts.ServerName, opts.Loops = f[1], f[0], 1
	opts.MaxConnsPerAddr = 0
	opts.ChannelRules = []engine.ChannelRule{{Prefix: "rb.r1.", Replicas: 1}, {Prefix: "rb.r2.", Replicas: 2}, {Prefix: "rb.r3.", Replicas: 3}}
	opts.Cluster = &engine.ClusterOptions{Listen: f[2], Join: f[3:], Secret: os.Getenv(secretEnv), ReportInterval: 250 * time.Millisecond,
		DataDir: o.dataDir, RaftListen: o.raftListen, BootstrapExpect: 3}
	srv, stop, err := benchcmd.StartEngine(opts)
	if err != nil {
		return nil, err
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		st, _ := srv.Cluster()
		alive := 0
		for _, m := range st.Members {
			if m.State == "alive" {
				alive++
			}
		}
		if alive == 3 && st.Raft.Leader != "" && len(st.Raft.Voters) == 3 {
			fmt.Fprintln(stdout, readyLine)
			return stop, nil
		}
		select {
		case <-ctx.Done():
			return stop, nil
		case <-t.C:
		}
	}
}

// serveNATS starts one nats-server cluster node (spec NAME,CLIENT,ROUTE,
// PEERROUTE...) and prints readyLine once it accepts clients.
func serveNATS(spec string, stdout io.Writer) (stop func(), err error) {
	f := strings.Split(spec, ",")
	if len(f) < 3 {
		return nil, fmt.Errorf("--serve-nats-node %q", spec)
	}
	n, err := peer.StartClusterNode(f[0], f[1], f[2], f[3:])
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(stdout, readyLine)
	return n.Shutdown, nil
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
	addrs []string // client addresses
	// dir holds the nodes' data directories ("" for none), removed by
	// stop.
	dir string
}

// stats returns each node's ProcStat, for its CPU time.
func (c *cluster3) stats() []bench.ProcStat {
	out := make([]bench.ProcStat, len(c.procs))
	for i, p := range c.procs {
		out[i] = p.Stat()
	}
	return out
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
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
		c.dir = ""
	}
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

// nodeKind is how one system's cluster node is started: the hidden flag of
// its child mode, node i's name, and its spec from every node's client and
// peer (gossip or route) address.
type nodeKind struct {
	system string // "sluice" or "nats": profile file names
	// log: each node keeps a metadata log, in a data directory of its
	// own and on a port of its own (Sluice)
	log  bool
	flag string
	name func(i int) string
	spec func(i int, name string, clients, peers []string) string
}

var (
	sluiceNodes = nodeKind{system: "sluice", log: true, flag: "--serve-sluice-node",
		name: func(i int) string { return string(rune('a' + i)) },
		spec: func(i int, name string, clients, peers []string) string {
			s := fmt.Sprintf("%s,%s,%s", name, clients[i], peers[i])
			if i > 0 {
				s += "," + peers[0] // every node joins the first
			}
			return s
		}}
	natsNodes = nodeKind{system: "nats", flag: "--serve-nats-node",
		name: func(i int) string { return "n" + string(rune('a'+i)) },
		spec: func(i int, name string, clients, peers []string) string {
			s := fmt.Sprintf("%s,%s,%s", name, clients[i], peers[i])
			for j := range peers {
				if j != i {
					s += ",nats://" + peers[j] // full mesh of routes
				}
			}
			return s
		}}
)

// errNodeExited: a node exited while the cluster started (typically a
// port that bench.FreePort gave out was taken by another process before
// the node bound it).
var errNodeExited = errors.New("node exited during start")

// start3 starts three nodes of kind k (start3Once), up to three times when
// a node exits during start, each time on fresh ports.
func start3(ctx context.Context, o options, k nodeKind, env []string, stderr io.Writer) (*cluster3, error) {
	for try := 1; ; try++ {
		c, err := start3Once(ctx, o, k, env, stderr)
		if err == nil || !errors.Is(err, errNodeExited) || try == 3 {
			return c, err
		}
		fmt.Fprintf(stderr, "rbench: %v; starting the %s cluster again on other ports\n", err, k.system)
	}
}

// start3Once starts three nodes of kind k as children of this binary (two
// free ports each; env added to their environment only; pinned to
// --server-cpus; profiled into --server-cpuprofile-dir), waits for each
// one's ready line (bounded by 30 s; a node that exits meanwhile is
// errNodeExited), and on failure stops every one.
func start3Once(ctx context.Context, o options, k nodeKind, env []string, stderr io.Writer) (c *cluster3, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	clients, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	peers, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	c = &cluster3{addrs: clients}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	var logs []string
	if k.log {
		if logs, err = freePorts(3); err != nil {
			return c, err
		}
		if c.dir, err = os.MkdirTemp("", "rbench-"+k.system+"-"); err != nil {
			return c, err
		}
	}
	var watches []*readyWatch
	for i := range 3 {
		name := k.name(i)
		argv := []string{self, k.flag, k.spec(i, name, clients, peers)}
		if k.log {
			argv = append(argv, "--serve-data-dir", filepath.Join(c.dir, name), "--serve-raft-listen", logs[i])
		}
		if o.profDir != "" {
			argv = append(argv, "--cpuprofile", filepath.Join(o.profDir, k.system+"-"+name+".pprof"))
		}
		w := &readyWatch{ready: make(chan struct{}), log: stderr}
		sp, err := bench.StartServerProcEnv(ctx, argv, env, clients[i], o.ServerCPUs, w)
		if err != nil {
			return c, fmt.Errorf("%s node %s: %w: %w", k.system, name, errNodeExited, err)
		}
		c.procs = append(c.procs, sp)
		watches = append(watches, w)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	exited := anyDone(c.procs)
	for i, w := range watches {
		select {
		case <-w.ready:
		case <-tctx.Done():
			return c, fmt.Errorf("%s node %s not ready: %w", k.system, k.name(i), tctx.Err())
		case <-exited:
			return c, fmt.Errorf("%s cluster: %w (its output is above)", k.system, errNodeExited)
		}
	}
	return c, nil
}

// anyDone returns a channel closed once any of procs has exited (its
// watchers end when the processes do: every one is stopped by the caller
// on failure and at the end).
func anyDone(procs []*bench.ServerProc) <-chan struct{} {
	out := make(chan struct{})
	var once sync.Once
	for _, p := range procs {
		go func() {
			<-p.Done()
			once.Do(func() { close(out) })
		}()
	}
	return out
}

// startSluice3 starts the Sluice cluster with a fresh random secret,
// handed to the children in their environment.
func startSluice3(ctx context.Context, o options, stderr io.Writer) (*cluster3, error) {
	sec := make([]byte, 32)
	_, _ = rand.Read(sec)
	return start3(ctx, o, sluiceNodes, []string{secretEnv + "=" + hex.EncodeToString(sec)}, stderr)
}

func startNATS3(ctx context.Context, o options, stderr io.Writer) (*cluster3, error) {
	return start3(ctx, o, natsNodes, nil, stderr)
}
