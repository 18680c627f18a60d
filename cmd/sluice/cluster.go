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
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-rtm/sluice/config"
	"github.com/sluice-rtm/sluice/engine"
	"github.com/sluice-rtm/sluice/wire"
)

// clusterSecretEnv is read for the cluster secret when no flag gives it,
// so that the secret need not appear in the process list.
const clusterSecretEnv = "SLUICE_CLUSTER_SECRET"

// Errors of `sluice cluster status`.
var (
	// errNotClusterNode: the server answered that it runs single-node.
	errNotClusterNode = errors.New("not a cluster node")
	// errNodeRefused: the server refused the node handshake (ERROR frame).
	errNodeRefused = errors.New("node handshake refused")
	// errStatusFailed: the server failed the STATUS request, or answered
	// something that is not a status document.
	errStatusFailed = errors.New("node request failed")
)

// statusMaxBody bounds the NODE_RESPONSE that carries the status
// document (a few hundred bytes per member).
const statusMaxBody = 16 << 20

// bindClusterFlags defines serve's cluster flags on fs, storing into c.
// Each has a key of the [cluster] table: --cluster-X is key X, --join is
// join and --client-advertise is client-advertise.
func bindClusterFlags(fs *flag.FlagSet, c *engine.ClusterOptions) {
	fs.StringVar(&c.Listen, "cluster-listen", c.Listen, "run as a cluster node, gossiping on `IP:PORT` (TCP and UDP); without it the server is single-node")
	fs.StringVar(&c.Advertise, "cluster-advertise", c.Advertise, "gossip `IP:PORT` other nodes use to reach this one (default: --cluster-listen's)")
	fs.StringVar(&c.ClientAdvertise, "client-advertise", c.ClientAdvertise, "client `HOST:PORT` other nodes and clients use for this node (default: the address --listen bound)")
	fs.Var(&addrList{p: &c.Join}, "join", "gossip `SEEDS` of members to join, comma-separated (repeatable): IP:PORT, HOST:PORT (every A/AAAA record of HOST) or dnssrv+NAME (every SRV record of NAME); names are resolved again at each attempt and this node's own address is skipped")
	fs.Var(quietString{&c.Secret}, "cluster-secret", "shared `SECRET` of the cluster, at least 32 bytes, the same on every node (default: $"+clusterSecretEnv+", then [cluster] secret)")
	fs.Float64Var(&c.Capacity, "cluster-capacity", c.Capacity, "the node's relative size `N` for placement (0 = its CPU count)")
	fs.DurationVar(&c.RPCTimeout, "cluster-rpc-timeout", c.RPCTimeout, "bound on one node-to-node request, `DUR` (0 = 2s)")
	fs.DurationVar(&c.ReportInterval, "cluster-report-interval", c.ReportInterval, "how often the node gossips its load, `DUR` (0 = 1s)")
	fs.BoolVar(&c.S2, "cluster-s2", c.S2, "S2-compress node-to-node batches of 512 bytes or more when that saves an eighth (for slow or metered links between nodes; it costs CPU)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "`DIR` of the cluster's metadata log (Raft log, snapshots, this node's server id); a node restarted with it keeps its identity (default: sluice-data/NODE-NAME in the working directory)")
	fs.StringVar(&c.RaftListen, "raft-listen", c.RaftListen, "`IP:PORT` of the metadata log's transport (default: --cluster-listen's IP, its port + 1)")
	fs.StringVar(&c.RaftAdvertise, "raft-advertise", c.RaftAdvertise, "metadata log `IP:PORT` other nodes dial (default: --cluster-advertise's IP with the raft port)")
	fs.IntVar(&c.BootstrapExpect, "bootstrap-expect", c.BootstrapExpect, "how many nodes a new cluster waits to see before it forms, `N` (0 = 1; set it to the number of nodes started together)")
	fs.DurationVar(&c.RaftTimeout, "raft-timeout", c.RaftTimeout, "the metadata log's heartbeat and election timeout, `DUR` (0 = 1s): a leader's failure is noticed within about twice it")
	fs.DurationVar(&c.NodeGoneAfter, "node-gone-after", c.NodeGoneAfter, "how long a node unreachable with its memory intact is waited for, `DUR` (0 = 60s): then what only it holds is announced lost; a restarted node is taken out at once")
}

// addrList is a flag.Value for a comma-separated list of addresses. The
// first Set of a parse replaces the list (so the flag overrides the
// configuration file); later ones append.
type addrList struct {
	p   *[]string
	set bool
}

func (a *addrList) String() string {
	if a == nil || a.p == nil {
		return ""
	}
	return strings.Join(*a.p, ",")
}

func (a *addrList) Set(v string) error {
	if !a.set {
		*a.p, a.set = nil, true
	}
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.TrimSpace(part); part == "" {
			return fmt.Errorf("empty address in %q", v)
		}
		*a.p = append(*a.p, part)
	}
	return nil
}

// hostname is os.Hostname (replaced in tests).
var hostname = os.Hostname

// defaultNodeName is a cluster node's name when none is given:
// HOSTNAME:PORT, the port being that of the client address listen.
func defaultNodeName(listen string) (string, error) {
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("listen: %q is not HOST:PORT: %w", listen, err)
	}
	if port == "0" {
		return "", errors.New("a cluster node listening on port 0 needs --node-name: its default name, HOSTNAME:PORT, would not be unique")
	}
	h, err := hostname()
	if err != nil || h == "" {
		return "", fmt.Errorf("cannot name this cluster node after its host (%v): give --node-name", err)
	}
	return net.JoinHostPort(h, port), nil
}

// gossipAddr returns the gossip address of the node that produced st.
func gossipAddr(st engine.Status) string {
	for _, m := range st.Members {
		if m.Name == st.Node {
			return m.Gossip
		}
	}
	return ""
}

const clusterDescription = `
Inspects a Sluice cluster. Subcommands:

  status   show the members of the cluster as one node sees them
  drain    drain a node for a restart: it hands what it holds to the
           others, sends its clients to them, and exits

Run 'sluice cluster status --help' or 'sluice cluster drain --help' for
their flags.`

func runCluster(ctx context.Context, std stdio, args []string) int {
	fs := newFlagSet("cluster", "SUBCOMMAND [FLAGS]", clusterDescription)
	if len(args) > 0 && args[0] == "status" {
		return runClusterStatus(ctx, std, args[1:])
	}
	if len(args) > 0 && args[0] == "drain" {
		return runClusterDrain(ctx, std, args[1:])
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return usageError(fs, std, fmt.Errorf("unknown subcommand %q", args[0]))
	}
	if code, done := parseOnly(fs, std, args); done {
		return code
	}
	return usageError(fs, std, errors.New("missing subcommand"))
}

const clusterStatusDescription = `
Asks one node (its client address, --server) for the cluster as it sees it:
every member with its state (alive, suspect, dead, left, or unreachable when
the node's link to it failed), client address, streamlets hosted, channels
managed, connections (clients and peers), messages received per second and
placement load. It speaks the node protocol (NODE_HELLO), so it needs the
cluster secret when the cluster has one: --secret, --config FILE (its
[cluster] secret) or $` + clusterSecretEnv + `. Exits 1 if the node cannot be asked,
refuses, or is a single-node server.`

// statusConfig is the parsed `cluster status` command line.
type statusConfig struct {
	server     string
	secret     string
	configPath string
	json       bool
	timeout    time.Duration
}

func parseClusterStatus(fs *flag.FlagSet, args []string) (statusConfig, []string, error) {
	cfg := statusConfig{server: defaultServer, timeout: 5 * time.Second}
	fs.StringVar(&cfg.server, "server", cfg.server, "client `HOST:PORT` of the node to ask")
	fs.Var(quietString{&cfg.secret}, "secret", "the cluster `SECRET` (default: $"+clusterSecretEnv+")")
	fs.StringVar(&cfg.configPath, "config", "", "read the cluster secret from the [cluster] table of TOML `FILE`")
	fs.BoolVar(&cfg.json, "json", false, "print the node's status document (JSON) instead of a table")
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "give up after `DUR`")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return cfg, nil, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case given["secret"] && given["config"]:
		return cfg, nil, errors.New("--secret and --config both give the secret: use one")
	case cfg.timeout <= 0:
		return cfg, nil, fmt.Errorf("--timeout must be positive, got %v", cfg.timeout)
	case cfg.server == "":
		return cfg, nil, errors.New("--server is empty")
	}
	if !given["secret"] && !given["config"] {
		cfg.secret = os.Getenv(clusterSecretEnv)
	}
	return cfg, pos, nil
}

func runClusterStatus(ctx context.Context, std stdio, args []string) int {
	fs := newFlagSet("cluster status", "[--server HOST:PORT] [--secret SECRET | --config FILE] [--json] [--timeout DUR]", clusterStatusDescription)
	cfg, pos, err := parseClusterStatus(fs, args)
	if code, done := parseExit(fs, std, err); done {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, std, fmt.Errorf("unexpected argument %q", pos[0]))
	}
	fail := func(err error) int {
		fmt.Fprintf(std.err, "sluice cluster status: %v\n", err)
		return exitFail
	}
	if cfg.configPath != "" {
		c, err := config.LoadCluster(cfg.configPath)
		if err != nil {
			return fail(err)
		}
		cfg.secret = c.Secret
	}
	doc, err := fetchStatus(ctx, cfg.server, cfg.secret, cfg.timeout)
	if err != nil {
		return fail(err)
	}
	var st engine.Status
	if err := json.Unmarshal(doc, &st); err != nil {
		return fail(fmt.Errorf("%w: %s answered a document that is not a status: %v", errStatusFailed, cfg.server, err))
	}
	if cfg.json {
		fmt.Fprintf(std.out, "%s\n", doc)
		return exitOK
	}
	printStatus(std.out, cfg.server, st)
	return exitOK
}

const clusterDrainDescription = `
Asks the cluster to drain node NODE (a member's name, as 'sluice cluster
status' lists it), through any node (--server, its client address; NODE
may be that node itself). The node then drains as on SIGTERM: it gossips
that it drains, so no node gives it new streamlets or channels; its
clients get GOAWAY and resume on other nodes; the streamlets it holds are
copied to other nodes; then it exits (at the latest after its
--drain-timeout). The command returns once the drain started; 'sluice
cluster status' shows the node as draining until it is gone. It speaks the
node protocol, so it needs the cluster secret like 'cluster status'.
With --self instead of NODE, the node --server names drains itself (a
Kubernetes preStop hook: 'sluice cluster drain --self --server
127.0.0.1:7400' in the pod, whose name the hook cannot pass).`

func runClusterDrain(ctx context.Context, std stdio, args []string) int {
	fs := newFlagSet("cluster drain", "NODE|--self [--server HOST:PORT] [--secret SECRET | --config FILE] [--timeout DUR]", clusterDrainDescription)
	self := fs.Bool("self", false, "drain the node that --server names, whatever its name")
	cfg, pos, err := parseClusterStatus(fs, args)
	if code, done := parseExit(fs, std, err); done {
		return code
	}
	switch {
	case len(pos) == 0 && !*self:
		return usageError(fs, std, errors.New("missing NODE (a member's name) or --self"))
	case len(pos) > 0 && *self:
		return usageError(fs, std, fmt.Errorf("NODE %q and --self: give one", pos[0]))
	case len(pos) > 1:
		return usageError(fs, std, fmt.Errorf("unexpected argument %q", pos[1]))
	}
	fail := func(err error) int {
		fmt.Fprintf(std.err, "sluice cluster drain: %v\n", err)
		return exitFail
	}
	if cfg.configPath != "" {
		c, err := config.LoadCluster(cfg.configPath)
		if err != nil {
			return fail(err)
		}
		cfg.secret = c.Secret
	}
	if *self {
		doc, err := fetchStatus(ctx, cfg.server, cfg.secret, cfg.timeout)
		if err != nil {
			return fail(err)
		}
		var st engine.Status
		if err := json.Unmarshal(doc, &st); err != nil || st.Node == "" {
			return fail(fmt.Errorf("%w: %s answered no node name (%v)", errStatusFailed, cfg.server, err))
		}
		pos = []string{st.Node}
	}
	var e wire.NodeEnc
	e.Str8(pos[0])
	if _, err := nodeRequest(ctx, cfg.server, cfg.secret, cfg.timeout, wire.OpDrain, e.B); err != nil {
		return fail(err)
	}
	fmt.Fprintf(std.out, "node %s drains\n", pos[0])
	return exitOK
}

// cliNodeName is the name `cluster status` gives itself in NODE_HELLO.
func cliNodeName() string { return "sluice-cli-" + strconv.Itoa(os.Getpid()) }

// fetchStatus asks the node at addr (its client address) for its status
// document over the node protocol: the node handshake (NODE_HELLO,
// NODE_CHALLENGE, NODE_PROOF, NODE_WELCOME), then one sealed NODE_REQUEST
// STATUS. The whole exchange is bounded by timeout and ctx.
func fetchStatus(ctx context.Context, addr, secret string, timeout time.Duration) ([]byte, error) {
	return nodeRequest(ctx, addr, secret, timeout, wire.OpStatus, nil)
}

// nodeRequest sends one NODE_REQUEST op with body to the node at addr
// after the node handshake and returns its result (fetchStatus).
func nodeRequest(ctx context.Context, addr, secret string, timeout time.Duration, op wire.NodeOp, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot reach %s: %w", addr, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	ioErr := func(err error) error {
		if ne, ok := errors.AsType[net.Error](err); ctx.Err() != nil || ok && ne.Timeout() {
			return fmt.Errorf("%s did not answer in time (%v)", addr, timeout)
		}
		return fmt.Errorf("talking to %s: %w", addr, err)
	}
	name := cliNodeName()
	sess, err := wire.NodeHandshake(c, wire.NodeDial{Name: name, Secret: secret})
	if e, ok := errors.AsType[wire.Error](err); ok {
		return nil, refusal(addr, secret, e)
	}
	if errors.Is(err, wire.ErrNodeAuth) {
		return nil, fmt.Errorf("%w: %s did not prove that it knows the cluster secret: %v", errNodeRefused, addr, err)
	}
	if errors.Is(err, wire.ErrMalformed) {
		return nil, fmt.Errorf("%w: %s: bad answer to NODE_HELLO: %v", errStatusFailed, addr, err)
	}
	if err != nil {
		return nil, ioErr(err)
	}
	sc := sess.Conn(c)
	if _, err := sc.Write(wire.AppendNodeRequest(nil, 1, op, body)); err != nil {
		return nil, ioErr(err)
	}
	r := wire.NewReader(sc, statusMaxBody)
	for {
		h, body, err := r.Next()
		if err != nil {
			return nil, ioErr(err)
		}
		switch h.Type {
		case wire.TypeNodeResponse:
			if h.ID != 1 {
				continue
			}
			status, res, text, err := wire.DecodeNodeResponse(body)
			switch {
			case err != nil:
				return nil, fmt.Errorf("%w: %s: %v", errStatusFailed, addr, err)
			case status != wire.NodeOK:
				return nil, fmt.Errorf("%w: %s: status %d: %s", errStatusFailed, addr, status, text)
			}
			return append([]byte(nil), res...), nil
		case wire.TypeError:
			e, _ := wire.DecodeError(h, body)
			return nil, fmt.Errorf("%w: %s: %v", errStatusFailed, addr, e)
		}
	}
}

// notClusterNode is the error for a server that runs single-node.
func notClusterNode(addr string) error {
	return fmt.Errorf("%s is %w: it runs single-node (started without --cluster-listen)", addr, errNotClusterNode)
}

// refusal describes an ERROR answer to NODE_HELLO: HELLO_REQUIRED from a
// single node, UNAUTHENTICATED for a missing or wrong secret, or another
// refusal.
func refusal(addr, secret string, e wire.Error) error {
	if e.Code == wire.CodeHelloRequired {
		// A single node takes no node connections: it answers NODE_HELLO
		// like any frame before a client HELLO.
		return notClusterNode(addr)
	}
	hint := ""
	if e.Code == wire.CodeUnauthenticated {
		if secret == "" {
			hint = " (give the cluster secret: --secret, --config or $" + clusterSecretEnv + ")"
		} else {
			hint = " (is the secret the cluster's?)"
		}
	}
	return fmt.Errorf("%w by %s: %v%s", errNodeRefused, addr, e, hint)
}

// printStatus writes st as a table sorted by member name.
func printStatus(w io.Writer, server string, st engine.Status) {
	ms := append([]engine.MemberStatus(nil), st.Members...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	alive := 0
	for _, m := range ms {
		if m.State == "alive" {
			alive++
		}
	}
	fmt.Fprintf(w, "node %s (%s) sees %d members, %d alive\n", st.Node, server, len(ms), alive)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tCLIENT\tSTREAMLETS\tCHANNELS\tCONNS\tMSGS/S\tLOAD")
	for _, m := range ms {
		client := m.Client
		if client == "" {
			client = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%.0f\t%.2f\n", m.Name, m.State, client, m.Streamlets, m.Channels, m.Conns, m.MsgsIn, m.Load)
	}
	tw.Flush()
	cp := st.Copies
	fmt.Fprintf(w, "copies by %s's manager: %d made, %d failed, %d running; %d streamlets under their replica count\n",
		st.Node, cp.Done, cp.Failed, cp.Running, cp.Waiting)
}
