//go:build faultsuite

package fault

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/engine"
	"github.com/sluice-rtm/sluice/internal/proctest"
)

// The network: one bridge in the test's namespace with address .254, and
// per node a namespace with a veth pair: the outer end a port of the
// bridge, the inner end eth0 with address .1, .2, ... The test process
// (publishers and subscribers) reaches the nodes through the bridge, so
// taking a node's bridge port down cuts it off from clients and peers
// alike; the one-way case drops only the node's packets to its peers.
//
// Every name carries the test process's pid ("sf<pid>..."): a run that
// was killed before its cleanup leaves names that the next run removes
// (sweepStale) once that pid is gone.

const (
	clientPort = 7400
	gossipPort = 7946
	secret     = "fault-suite-cluster-secret-0123456789abcdef"
)

var namePrefix = "sf" + strconv.Itoa(os.Getpid())

// topoCount numbers the topologies of this process: a namespace's veth
// pair vanishes asynchronously after the namespace is deleted, so each
// case uses names of its own.
var topoCount int

// node is one `sluice serve` in its own network namespace.
type node struct {
	name string // "a", "b", ...
	ns   string // network namespace
	veth string // the bridge port (outer end)
	ip   string
	log  string
	p    proctest.Proc // its process (topo.start), named and logged as above
}

func (n *node) client() string { return fmt.Sprintf("%s:%d", n.ip, clientPort) }
func (n *node) gossip() string { return fmt.Sprintf("%s:%d", n.ip, gossipPort) }

// topo is the network and the processes of one case.
type topo struct {
	t      *testing.T
	bin    string
	dir    string
	bridge string
	subnet string // "10.231.X"
	nodes  []*node
	extra  []string // serve flags of every node
	// The case's channels and the indexes of the nodes its publishers and
	// subscribers connect to (set by runCase before the fault).
	chans      []string
	pubs, subs []int
	// caps are the --cluster-capacity of the nodes that do not have 1.
	caps map[string]float64
	// joinAll: a node joins every other node, not only the first (the
	// nemesis restarts any node while any other may be down or cut off).
	joinAll bool
	// nodeFlags, if set, returns serve flags of node n alone (each
	// start), after extra.
	nodeFlags func(n *node) []string
	// dataDirs: the binary keeps the metadata log in --data-dir; each node
	// gets one in dir, kept across its restarts (the nemesis's wipeData
	// gives it a fresh one).
	dataDirs bool
	wipes    map[string]int // wipeData calls, by node
}

// dataDir is node n's --data-dir.
func (tp *topo) dataDir(n *node) string {
	return filepath.Join(tp.dir, fmt.Sprintf("%s-data-%d", n.name, tp.wipes[n.name]))
}

// serveSupports reports which of the flags the binary's `serve --help`
// lists (the Raft coordination added --data-dir and --bootstrap-expect).
func serveSupports(bin string, flags ...string) map[string]bool {
	out, _ := exec.Command(bin, "serve", "--help").CombinedOutput() // exits 0 or 2 after printing
	has := map[string]bool{}
	for _, f := range flags {
		has[f] = strings.Contains(string(out), "-"+f+" ")
	}
	return has
}

// capacity returns node name's --cluster-capacity.
func (tp *topo) capacity(name string) float64 {
	if c, ok := tp.caps[name]; ok {
		return c
	}
	return 1
}

// names returns the names of every node of the topology.
func (tp *topo) names() []string {
	var out []string
	for _, n := range tp.nodes {
		out = append(out, n.name)
	}
	return out
}

// nameList returns the names of the nodes with indexes is.
func (tp *topo) nameList(is []int) []string {
	var out []string
	for _, i := range is {
		out = append(out, tp.nodes[i].name)
	}
	return out
}

// running returns the indexes of the nodes whose process runs.
func (tp *topo) running() []int {
	var out []int
	for i, n := range tp.nodes {
		if n.p.Running() {
			out = append(out, i)
		}
	}
	return out
}

// run runs a command and fails the test with its output on error.
func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// runQuiet runs a command, ignoring failure (cleanup).
func runQuiet(args ...string) { _ = exec.Command(args[0], args[1:]...).Run() }

// needRoot skips unless the test can build namespaces.
func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("fault suite: needs root (network namespaces); run as root, as CI does")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("fault suite: needs the ip command (iproute2); .ci/run installs it")
	}
}

var staleName = regexp.MustCompile(`^sf([0-9]+)`)

// sweepStale removes namespaces and links of earlier runs whose process
// is gone.
func sweepStale() {
	dead := func(name string) bool {
		m := staleName.FindStringSubmatch(name)
		if m == nil || m[1] == strconv.Itoa(os.Getpid()) {
			return false
		}
		_, err := os.Stat("/proc/" + m[1])
		return err != nil
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && dead(f[0]) {
				runQuiet("ip", "netns", "del", f[0])
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name := strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0]
			if dead(name) {
				runQuiet("ip", "link", "del", name)
			}
		}
	}
}

// pickSubnet returns a 10.231.X prefix that no route of this namespace
// uses.
func pickSubnet(t *testing.T) string {
	out, _ := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	for i := 0; i < 250; i++ {
		s := fmt.Sprintf("10.231.%d", (os.Getpid()+i)%250+1)
		if !bytes.Contains(out, []byte(s+".")) {
			return s
		}
	}
	t.Fatal("no free 10.231.X.0/24 subnet")
	return ""
}

// newTopo builds the bridge and n namespaces; t.Cleanup kills the
// processes and removes everything, and on failure prints the end of each
// node's log.
func newTopo(t *testing.T, bin string, n int, extra ...string) *topo {
	sweepStale()
	topoCount++
	prefix := fmt.Sprintf("%sc%d", namePrefix, topoCount%10)
	tp := &topo{t: t, bin: bin, dir: t.TempDir(), bridge: prefix + "br", subnet: pickSubnet(t), extra: extra,
		dataDirs: serveSupports(bin, "data-dir")["data-dir"], wipes: map[string]int{}}
	t.Cleanup(tp.cleanup)
	run(t, "ip", "link", "add", tp.bridge, "type", "bridge")
	run(t, "ip", "addr", "add", tp.subnet+".254/24", "dev", tp.bridge)
	run(t, "ip", "link", "set", tp.bridge, "up")
	for i := 0; i < n; i++ {
		nd := &node{name: string(rune('a' + i)), ns: fmt.Sprintf("%sn%d", prefix, i),
			veth: fmt.Sprintf("%sv%d", prefix, i), ip: fmt.Sprintf("%s.%d", tp.subnet, i+1)}
		nd.log = filepath.Join(tp.dir, nd.name+".log")
		nd.p = proctest.Proc{Name: nd.name, Log: nd.log}
		tp.nodes = append(tp.nodes, nd)
		run(t, "ip", "netns", "add", nd.ns)
		run(t, "ip", "-n", nd.ns, "link", "set", "lo", "up")
		run(t, "ip", "link", "add", nd.veth, "type", "veth", "peer", "name", "eth0", "netns", nd.ns)
		run(t, "ip", "link", "set", nd.veth, "master", tp.bridge)
		run(t, "ip", "link", "set", nd.veth, "up")
		run(t, "ip", "-n", nd.ns, "addr", "add", nd.ip+"/24", "dev", "eth0")
		run(t, "ip", "-n", nd.ns, "link", "set", "eth0", "up")
	}
	return tp
}

func (tp *topo) cleanup() {
	for _, n := range tp.nodes {
		n.p.Stop()
	}
	keep := os.Getenv("SLUICE_FAULT_LOGS")
	for _, n := range tp.nodes {
		if tp.t.Failed() {
			tp.t.Logf("---- end of the log of node %s ----\n%s", n.name, n.p.Tail(40))
		}
		if keep != "" && (tp.t.Failed() || os.Getenv("SLUICE_FAULT_KEEP_ALL") != "") {
			tp.keepLog(keep, n)
		}
	}
	for _, n := range tp.nodes {
		runQuiet("ip", "link", "del", n.veth) // both ends of the pair
		runQuiet("ip", "netns", "del", n.ns)
	}
	runQuiet("ip", "link", "del", tp.bridge)
}

// keepLog copies node n's whole log into dir (SLUICE_FAULT_LOGS: the
// logs of a failed case outlive its temporary directory).
func (tp *topo) keepLog(dir string, n *node) {
	b, err := os.ReadFile(n.log)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	dst := filepath.Join(dir, fmt.Sprintf("%s-%s-%s.log", strings.ReplaceAll(tp.t.Name(), "/", "_"),
		time.Now().UTC().Format("150405"), n.name))
	if err == nil {
		err = os.WriteFile(dst, b, 0o644)
	}
	if err != nil {
		tp.t.Logf("keeping the log of node %s: %v", n.name, err)
		return
	}
	tp.t.Logf("the log of node %s is kept in %s", n.name, dst)
}

// start runs node n in its namespace, joining the first node unless it
// is the first, and waits until it logs that it is ready.
func (tp *topo) start(n *node) {
	tp.t.Helper()
	// The shutdown after a drain (leaving the membership, closing the
	// links, stopping gnet) takes about 0.9 s on an idle machine: 1 s
	// made a drained node exit 1 now and then under load, failing the
	// rolling restarts.
	args := []string{"netns", "exec", n.ns, tp.bin, "serve", "--node-name", n.name,
		"--listen", n.client(), "--cluster-listen", n.gossip(), "--loops", "1",
		"--cluster-capacity", strconv.FormatFloat(tp.capacity(n.name), 'g', -1, 64),
		"--cluster-report-interval", "250ms", "--shutdown-timeout", "5s"}
	switch {
	case tp.joinAll:
		var seeds []string
		for _, o := range tp.nodes {
			if o != n {
				seeds = append(seeds, o.gossip())
			}
		}
		args = append(args, "--join", strings.Join(seeds, ","))
	case n != tp.nodes[0]:
		args = append(args, "--join", tp.nodes[0].gossip())
	case tp.nodes[1].p.Started(): // restarted first node: join the second
		args = append(args, "--join", tp.nodes[1].gossip())
	}
	args = append(args, tp.extra...)
	if tp.dataDirs { // in the test's directory, not the working directory's sluice-data/
		args = append(args, "--data-dir", tp.dataDir(n))
	}
	if tp.nodeFlags != nil {
		args = append(args, tp.nodeFlags(n)...)
	}
	// ip netns exec execs the command: the process is the server itself,
	// so signals go straight to it.
	n.p.Start(tp.t, []string{"SLUICE_CLUSTER_SECRET=" + secret}, append([]string{"ip"}, args...)...)
}

// status asks node n for its view (sluice cluster status).
func (tp *topo) status(n *node) (engine.Status, error) {
	return proctest.Status(tp.bin, n.client(), secret, 4*time.Second)
}

// waitAlive waits until every node in ns sees want alive members.
func (tp *topo) waitAlive(want int, d time.Duration, ns ...*node) {
	tp.t.Helper()
	proctest.WaitUntil(tp.t, fmt.Sprintf("%d alive members", want), d, 200*time.Millisecond, func() (bool, string) {
		for _, n := range ns {
			st, err := tp.status(n)
			if alive := proctest.Alive(st); err != nil || alive != want {
				return false, fmt.Sprintf("%s: %d alive %v", n.name, alive, err)
			}
		}
		return true, ""
	})
}

func (n *node) signal(t *testing.T, sig syscall.Signal) { n.p.Signal(t, sig) }

// kill stops node n with SIGKILL and waits for it to exit.
func (n *node) kill(t *testing.T) { n.p.Kill(t) }

// cut takes node n's bridge port down (a full partition of n).
func (tp *topo) cut(n *node) { run(tp.t, "ip", "link", "set", n.veth, "down") }

// heal brings it back.
func (tp *topo) heal(n *node) { run(tp.t, "ip", "link", "set", n.veth, "up") }

// dropToPeers makes node n's packets to its peers (or only to those in
// only) vanish (nftables in n's namespace), while its packets to the clients (the bridge address)
// and everything it receives still pass: a one-way partition. It returns
// the function that removes the rule.
func (tp *topo) dropToPeers(n *node, only ...*node) func() {
	t := tp.t
	var peers []string
	for _, p := range tp.nodes {
		if p != n && (len(only) == 0 || contains(only, p)) {
			peers = append(peers, p.ip)
		}
	}
	// A table per cut: the nemesis lays cuts over one another and heals
	// each alone.
	nftCount++
	table := fmt.Sprintf("sluicefault%d", nftCount)
	rules := fmt.Sprintf("table inet %s {\n chain out {\n  type filter hook output priority 0; policy accept;\n  ip daddr { %s } drop\n }\n}\n",
		table, strings.Join(peers, ", "))
	cmd := exec.Command("ip", "netns", "exec", n.ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
	return func() { run(t, "ip", "netns", "exec", n.ns, "nft", "delete", "table", "inet", table) }
}

// nftCount numbers the nftables tables of this process (dropToPeers);
// only the test's goroutine cuts.
var nftCount int

func contains(ns []*node, n *node) bool {
	for _, x := range ns {
		if x == n {
			return true
		}
	}
	return false
}
