package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/engine"
	"github.com/sluice-rtm/sluice/internal/proctest"
	"github.com/sluice-rtm/sluice/wire"
)

const (
	testSecret  = "0123456789abcdef0123456789abcdef"
	otherSecret = "fedcba9876543210fedcba9876543210"
)

// stubHostname makes defaultNodeName see host h for one test.
func stubHostname(t *testing.T, h string) {
	old := hostname
	hostname = func() (string, error) { return h, nil }
	t.Cleanup(func() { hostname = old })
}

func TestParseServeCluster(t *testing.T) {
	stubHostname(t, "host1")
	t.Setenv(clusterSecretEnv, "")
	for _, tc := range []struct {
		args  []string
		check func(serveConfig, engine.Options) bool
		err   []string // substrings of the error
	}{
		{nil, func(c serveConfig, o engine.Options) bool {
			return o.Cluster == nil && o.ServerName == "sluice" && !c.nameSet
		}, nil},
		{[]string{"--cluster-listen", "127.0.0.1:0", "--node-name", "n1", "--join", "10.0.0.1:7946, 10.0.0.2:7946",
			"--join", "10.0.0.3:7946", "--cluster-advertise", "10.0.0.9:7946", "--client-advertise", "10.0.0.9:7400",
			"--cluster-secret", testSecret, "--cluster-capacity", "3", "--cluster-rpc-timeout", "1s",
			"--cluster-report-interval", "300ms", "--data-dir", "/tmp/sluice-x", "--bootstrap-expect", "3"}, func(c serveConfig, o engine.Options) bool {
			want := engine.ClusterOptions{Listen: "127.0.0.1:0", Advertise: "10.0.0.9:7946", ClientAdvertise: "10.0.0.9:7400",
				Join: []string{"10.0.0.1:7946", "10.0.0.2:7946", "10.0.0.3:7946"}, Secret: testSecret, Capacity: 3,
				RPCTimeout: time.Second, ReportInterval: 300 * time.Millisecond, DataDir: "/tmp/sluice-x", BootstrapExpect: 3}
			return o.Cluster != nil && o.ServerName == "n1" && c.nameSet &&
				slices.Equal(o.Cluster.Join, want.Join) && o.Cluster.Listen == want.Listen && o.Cluster.Advertise == want.Advertise &&
				o.Cluster.ClientAdvertise == want.ClientAdvertise && o.Cluster.Secret == want.Secret && o.Cluster.Capacity == 3 &&
				o.Cluster.RPCTimeout == want.RPCTimeout && o.Cluster.ReportInterval == want.ReportInterval &&
				o.Cluster.DataDir == want.DataDir && o.Cluster.BootstrapExpect == want.BootstrapExpect
		}, nil},
		{[]string{"--name", "n2", "--cluster-listen", "127.0.0.1:0"}, func(c serveConfig, o engine.Options) bool {
			return o.Cluster != nil && o.ServerName == "n2"
		}, nil},
		// Cluster mode without a name: HOSTNAME:PORT of the client address.
		{[]string{"--listen", "127.0.0.1:7411", "--cluster-listen", "127.0.0.1:7946"}, func(c serveConfig, o engine.Options) bool {
			return o.ServerName == "host1:7411"
		}, nil},
		// A single node keeps its default name.
		{[]string{"--listen", "127.0.0.1:7411"}, func(c serveConfig, o engine.Options) bool {
			return o.ServerName == "sluice" && o.Cluster == nil
		}, nil},
		// A secret without cluster mode is accepted and unused.
		{[]string{"--cluster-secret", testSecret}, func(c serveConfig, o engine.Options) bool {
			return o.Cluster == nil && c.cluster.Secret == testSecret
		}, nil},
		{[]string{"--listen", "127.0.0.1:0", "--cluster-listen", "127.0.0.1:0"}, nil, []string{"port 0", "--node-name"}},
		{[]string{"--join", "127.0.0.1:7946"}, nil, []string{"cluster.join", "--cluster-listen"}},
		{[]string{"--client-advertise", "127.0.0.1:7400"}, nil, []string{"cluster.client-advertise", "--cluster-listen"}},
		{[]string{"--cluster-listen", "nowhere", "--node-name", "n"}, nil, []string{"cluster.listen", "HOST:PORT"}},
		{[]string{"--cluster-listen", "127.0.0.1:0", "--node-name", "n", "--join", "a:1,b"}, nil, []string{"cluster.join[1]"}},
		{[]string{"--cluster-listen", "127.0.0.1:0", "--node-name", "n", "--join", "a:1,,b:2"}, nil, []string{"empty address"}},
		{[]string{"--cluster-listen", "127.0.0.1:0", "--node-name", strings.Repeat("n", 65)}, nil, []string{"name", "1..64"}},
		{[]string{"--cluster-listen", "127.0.0.1:0", "--node-name", "n", "--cluster-capacity", "-1"}, nil, []string{"cluster.capacity"}},
		{[]string{"--cluster-listen", "127.0.0.1:0", "--node-name", "n", "--cluster-secret", "too-short-secret"}, nil, []string{"cluster.secret", "at least 32"}},
	} {
		fs := newFlagSet("serve", "", "")
		cfg, _, err := parseServe(fs, tc.args)
		if tc.err != nil {
			if err == nil {
				t.Fatalf("%q: accepted", tc.args)
			}
			for _, w := range tc.err {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("%q: error %q does not mention %q", tc.args, err, w)
				}
			}
			if strings.Contains(err.Error(), "too-short-secret") {
				t.Fatalf("%q: error %q shows the secret", tc.args, err)
			}
			continue
		}
		if err != nil || !tc.check(cfg, cfg.engineOptions()) {
			t.Fatalf("%q: %+v %+v %v", tc.args, cfg, cfg.engineOptions().Cluster, err)
		}
	}
}

// TestParseServeClusterPrecedence: flags win over $SLUICE_CLUSTER_SECRET,
// which wins over the file; --join replaces the file's seeds; a name in
// the file is kept, and without one the node is named HOSTNAME:PORT.
func TestParseServeClusterPrecedence(t *testing.T) {
	stubHostname(t, "host2")
	dir := t.TempDir()
	path := filepath.Join(dir, "s.toml")
	writeFile(t, path, "listen = \"127.0.0.1:7412\"\n[cluster]\nlisten = \"127.0.0.1:7946\"\njoin = [\"10.0.0.1:7946\"]\nsecret = \""+
		testSecret+"\"\ncapacity = 2\nrpc-timeout = \"3s\"\n")
	parse := func(args ...string) engine.Options {
		t.Helper()
		cfg, _, err := parseServe(newFlagSet("serve", "", ""), append([]string{"--config", path}, args...))
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		return cfg.engineOptions()
	}
	t.Setenv(clusterSecretEnv, "")
	o := parse()
	if o.Cluster == nil || o.Cluster.Secret != testSecret || !slices.Equal(o.Cluster.Join, []string{"10.0.0.1:7946"}) ||
		o.Cluster.Capacity != 2 || o.Cluster.RPCTimeout != 3*time.Second || o.ServerName != "host2:7412" {
		t.Fatalf("file alone: %+v %+v", o.ServerName, o.Cluster)
	}
	o = parse("--join", "10.0.0.2:7946", "--cluster-capacity", "5", "--node-name", "x")
	if !slices.Equal(o.Cluster.Join, []string{"10.0.0.2:7946"}) || o.Cluster.Capacity != 5 || o.ServerName != "x" {
		t.Fatalf("flags over file: %+v %+v", o.ServerName, o.Cluster)
	}
	t.Setenv(clusterSecretEnv, otherSecret)
	if o := parse(); o.Cluster.Secret != otherSecret {
		t.Fatal("$" + clusterSecretEnv + " does not override the file's secret")
	}
	if o := parse("--cluster-secret", testSecret+"!"); o.Cluster.Secret != testSecret+"!" {
		t.Fatal("--cluster-secret does not override $" + clusterSecretEnv)
	}
	t.Setenv(clusterSecretEnv, "short-env-secret")
	if _, _, err := parseServe(newFlagSet("serve", "", ""), []string{"--config", path}); err == nil ||
		!strings.Contains(err.Error(), "$"+clusterSecretEnv) || strings.Contains(err.Error(), "short-env-secret") {
		t.Fatalf("short secret in the environment: %v", err)
	}
	if _, _, err := parseServe(newFlagSet("serve", "", ""), []string{"--config", path, "--cluster-secret", testSecret}); err != nil {
		t.Fatalf("--cluster-secret does not replace a short $%s: %v", clusterSecretEnv, err)
	}
	t.Setenv(clusterSecretEnv, "")
	writeFile(t, path, "listen = \"127.0.0.1:7412\"\nname = \"filenode\"\n[cluster]\nlisten = \"127.0.0.1:7946\"\n")
	if o := parse(); o.ServerName != "filenode" {
		t.Fatalf("the file's name was replaced by %q", o.ServerName)
	}
	if o := parse("--cluster-listen", ""); o.Cluster != nil {
		t.Fatal("--cluster-listen \"\" does not turn the file's cluster mode off")
	}
}

// TestServeUsageHidesSecret: the secret shows neither in the usage text
// nor in the error of a bad command line.
func TestServeUsageHidesSecret(t *testing.T) {
	t.Setenv(clusterSecretEnv, otherSecret)
	for _, args := range [][]string{
		{"serve", "--help"},
		{"serve", "--cluster-secret", testSecret, "--bogus"},
		{"serve", "--cluster-secret", testSecret, "--cluster-listen", "nowhere"},
		{"cluster", "status", "--secret", testSecret, "--bogus"},
	} {
		_, out, errs := runCmd(context.Background(), "", args...)
		if strings.Contains(out+errs, testSecret) || strings.Contains(out+errs, otherSecret) {
			t.Fatalf("%q shows the secret:\n%s%s", args, out, errs)
		}
	}
}

// TestClusterStatusCommand asks a one-node cluster (a separate process,
// so that the node protocol runs between processes) for its status.
func TestClusterStatusCommand(t *testing.T) {
	c := newMPCluster(t, "solo")
	n := c.nodes["solo"]
	c.start(n)
	c.waitStatus("node up", 20*time.Second, func(st engine.Status) bool { return aliveMembers(st) == 1 }, n)
	addr := n.client
	ctx := ctxE2E(t)
	t.Setenv(clusterSecretEnv, "")

	code, out, errs := runCmd(ctx, "", "cluster", "status", "--server", addr, "--secret", mpSecret)
	row := regexp.MustCompile(`(?m)^solo\s+alive\s+` + regexp.QuoteMeta(addr) + `\s+\d+\s+\d+\s+\d+\s+\d+\s+\S+$`)
	if code != exitOK || !strings.Contains(out, "NAME") || !strings.Contains(out, "MSGS/S") || !row.MatchString(out) {
		t.Fatalf("table: code %d\nstdout: %s\nstderr: %s", code, out, errs)
	}

	code, out, errs = runCmd(ctx, "", "cluster", "status", "--server", addr, "--secret", mpSecret, "--json")
	var st engine.Status
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || st.Node != "solo" || len(st.Members) != 1 ||
		st.Members[0].State != "alive" || st.Members[0].Client != addr || st.Members[0].Gossip != n.gossip {
		t.Fatalf("--json: code %d\nstdout: %s\nstderr: %s", code, out, errs)
	}

	// The secret from the environment or from a configuration file.
	t.Setenv(clusterSecretEnv, mpSecret)
	if code, out, errs := runCmd(ctx, "", "cluster", "status", "--server", addr); code != exitOK || !strings.Contains(out, "solo") {
		t.Fatalf("secret from $%s: code %d %s %s", clusterSecretEnv, code, out, errs)
	}
	t.Setenv(clusterSecretEnv, "")
	path := filepath.Join(t.TempDir(), "s.toml")
	writeFile(t, path, "[cluster]\nsecret = \""+mpSecret+"\"\n")
	if code, out, errs := runCmd(ctx, "", "cluster", "status", "--server", addr, "--config", path); code != exitOK || !strings.Contains(out, "solo") {
		t.Fatalf("secret from --config: code %d %s %s", code, out, errs)
	}

	// Refusals: no secret, a wrong one.
	code, out, errs = runCmd(ctx, "", "cluster", "status", "--server", addr)
	if code != exitFail || out != "" || !strings.Contains(errs, "UNAUTHENTICATED") || !strings.Contains(errs, "give the cluster secret") {
		t.Fatalf("no secret: code %d stdout %q stderr %q", code, out, errs)
	}
	code, out, errs = runCmd(ctx, "", "cluster", "status", "--server", addr, "--secret", otherSecret)
	if code != exitFail || out != "" || !strings.Contains(errs, "bad node proof") || strings.Contains(errs, otherSecret) {
		t.Fatalf("wrong secret: code %d stdout %q stderr %q", code, out, errs)
	}
	// Refused callers learn nothing of the cluster: no member, no gossip
	// address, no state (the acceptor's NODE_CHALLENGE names only itself).
	for _, text := range []string{errs, out} {
		if strings.Contains(text, n.gossip) || strings.Contains(text, "alive") || strings.Contains(text, "members") {
			t.Fatalf("a refused status printed cluster details: %q", text)
		}
	}
}

func TestClusterStatusSingleNode(t *testing.T) {
	addr := startEngine(t)
	code, out, errs := runCmd(ctxE2E(t), "", "cluster", "status", "--server", addr)
	if code != exitFail || out != "" || !strings.Contains(errs, "not a cluster node") || !strings.Contains(errs, "--cluster-listen") {
		t.Fatalf("code %d stdout %q stderr %q", code, out, errs)
	}
}

func TestClusterStatusUnreachable(t *testing.T) {
	ctx := ctxE2E(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	code, _, errs := runCmd(ctx, "", "cluster", "status", "--server", closed, "--timeout", "2s")
	if code != exitFail || !strings.Contains(errs, "cannot reach") {
		t.Fatalf("closed port: code %d stderr %q", code, errs)
	}

	// A server that accepts and never answers: the timeout ends it.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := silent.Accept(); err == nil {
			accepted <- c
		}
	}()
	start := time.Now()
	code, _, errs = runCmd(ctx, "", "cluster", "status", "--server", silent.Addr().String(), "--timeout", "200ms")
	if code != exitFail || !strings.Contains(errs, "did not answer in time") || time.Since(start) > 5*time.Second {
		t.Fatalf("silent server: code %d after %v, stderr %q", code, time.Since(start), errs)
	}
	(<-accepted).Close()
}

func TestClusterCommandLine(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.toml")
	writeFile(t, path, "[cluster]\nsecret = \"short\"\n")
	checkCommands(t, ctx, []cmdCase{
		{[]string{"help"}, exitOK, "cluster", ""},
		{[]string{"help", "cluster"}, exitOK, "status", ""},
		{[]string{"help", "cluster", "status"}, exitOK, "--secret", ""},
		{[]string{"cluster", "status", "--help"}, exitOK, "NODE_HELLO", ""},
		{[]string{"cluster"}, exitUsage, "", "missing subcommand"},
		{[]string{"cluster", "stats"}, exitUsage, "", `unknown subcommand "stats"`},
		{[]string{"cluster", "status", "extra"}, exitUsage, "", "unexpected argument"},
		{[]string{"cluster", "status", "--secret", "x", "--config", "y"}, exitUsage, "", "use one"},
		{[]string{"cluster", "status", "--timeout", "0s"}, exitUsage, "", "--timeout"},
		{[]string{"cluster", "status", "--config", path}, exitFail, "", "cluster.secret"},
		{[]string{"serve", "--help"}, exitOK, "--cluster-listen", ""},
	})
}

func TestPrintStatusSortsByName(t *testing.T) {
	st := engine.Status{Node: "b", Members: []engine.MemberStatus{
		{Name: "c", State: "dead", Client: "h:3"},
		{Name: "a", State: "alive", Client: "h:1", Streamlets: 4, Channels: 2, Conns: 7, MsgsIn: 1234.4, Load: 0.5},
		{Name: "b", State: "alive"},
	}, Copies: engine.CopyStatus{Done: 3, Failed: 1, Running: 2, Waiting: 5}}
	var buf bytes.Buffer
	printStatus(&buf, "h:2", st)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 6 || lines[0] != "node b (h:2) sees 3 members, 2 alive" ||
		lines[5] != "copies by b's manager: 3 made, 1 failed, 2 running; 5 streamlets under their replica count" {
		t.Fatalf("output:\n%s", buf.String())
	}
	for i, want := range []string{
		`^NAME\s+STATE\s+CLIENT\s+STREAMLETS\s+CHANNELS\s+CONNS\s+MSGS/S\s+LOAD$`,
		`^a\s+alive\s+h:1\s+4\s+2\s+7\s+1234\s+0\.50$`,
		`^b\s+alive\s+-\s+0\s+0\s+0\s+0\s+0\.00$`,
		`^c\s+dead\s+h:3\s+`,
	} {
		if !regexp.MustCompile(want).MatchString(lines[i+1]) {
			t.Fatalf("line %d %q does not match %s", i+1, lines[i+1], want)
		}
	}
}

func TestDefaultNodeName(t *testing.T) {
	stubHostname(t, "box")
	if n, err := defaultNodeName("0.0.0.0:7400"); err != nil || n != "box:7400" {
		t.Fatalf("got %q, %v", n, err)
	}
	if _, err := defaultNodeName("127.0.0.1:0"); err == nil {
		t.Fatal("port 0 accepted")
	}
	hostname = func() (string, error) { return "", errors.New("no name") }
	if _, err := defaultNodeName("127.0.0.1:7400"); err == nil || !strings.Contains(err.Error(), "--node-name") {
		t.Fatalf("no hostname: %v", err)
	}
}

// TestClusterDrainCommand: `sluice cluster drain b`, asked of node a,
// makes b drain and exit 0 on its own; a then sees b gone (it left).
func TestClusterDrainCommand(t *testing.T) {
	c := newMPCluster(t, "a", "b")
	a, b := c.nodes["a"], c.nodes["b"]
	c.start(a)
	c.start(b, a.gossip)
	two := func(st engine.Status) bool { return aliveMembers(st) == 2 }
	c.waitStatus("two alive members", 30*time.Second, two, a, b)
	ctx := ctxE2E(t)
	t.Setenv(clusterSecretEnv, "")
	if code, _, errs := runCmd(ctx, "", "cluster", "drain", "--server", a.client, "--secret", mpSecret); code != exitUsage ||
		!strings.Contains(errs, "missing NODE") {
		t.Fatalf("no NODE: code %d stderr %q", code, errs)
	}
	if code, _, errs := runCmd(ctx, "", "cluster", "drain", "nobody", "--server", a.client, "--secret", mpSecret); code != exitFail ||
		!strings.Contains(errs, "not a live member") {
		t.Fatalf("unknown NODE: code %d stderr %q", code, errs)
	}
	code, out, errs := runCmd(ctx, "", "cluster", "drain", "b", "--server", a.client, "--secret", mpSecret)
	if code != exitOK || !strings.Contains(out, "node b drains") {
		t.Fatalf("drain b: code %d stdout %q stderr %q", code, out, errs)
	}
	select {
	case <-b.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("b did not exit after its drain")
	}
	if code := b.ExitCode(); code != 0 {
		t.Fatalf("b exited with %d after its drain, want 0", code)
	}
	logs, _ := os.ReadFile(b.Log)
	if !strings.Contains(string(logs), "asked to drain") || !strings.Contains(string(logs), "sluice drained") {
		t.Fatalf("b's log does not show the drain:\n%s", logs)
	}
	c.waitStatus("a sees b gone", 20*time.Second, func(st engine.Status) bool { return aliveMembers(st) == 1 }, a)
}

// TestClusterDrainGoesOnAfterOneSIGTERM: Kubernetes runs 'sluice cluster
// drain' as the preStop hook and sends SIGTERM as soon as the hook
// returned, while the node drains: that first signal must not cut the
// drain short (a second one does). A client that ignores GOAWAY keeps b
// draining until its --drain-timeout, so the signal surely comes during
// the drain.
func TestClusterDrainGoesOnAfterOneSIGTERM(t *testing.T) {
	c := newMPCluster(t, "a", "b")
	a, b := c.nodes["a"], c.nodes["b"]
	c.start(a)
	b.Start(t, []string{clusterSecretEnv + "=" + mpSecret}, c.bin, "serve", "--node-name", "b", "--listen", b.client,
		"--cluster-listen", b.gossip, "--join", a.gossip, "--raft-listen", b.raft, "--data-dir", b.data, "--raft-timeout", "300ms",
		"--loops", "2", "--drain-timeout", "3s", "--shutdown-timeout", "2s")
	c.waitStatus("two alive members", 30*time.Second, func(st engine.Status) bool { return aliveMembers(st) == 2 }, a, b)
	stubborn, err := net.DialTimeout("tcp", b.client, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer stubborn.Close()
	if _, err := stubborn.Write(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "stubborn"})); err != nil {
		t.Fatal(err)
	}
	ctx := ctxE2E(t)
	if code, _, errs := runCmd(ctx, "", "cluster", "drain", "b", "--self", "--server", b.client, "--secret", mpSecret); code != exitUsage ||
		!strings.Contains(errs, "give one") {
		t.Fatalf("NODE and --self: code %d stderr %q", code, errs)
	}
	// As the chart's preStop hook asks: the node at --server, by itself.
	if code, out, errs := runCmd(ctx, "", "cluster", "drain", "--self", "--server", b.client, "--secret", mpSecret); code != exitOK ||
		!strings.Contains(out, "node b drains") {
		t.Fatalf("drain --self: code %d stdout %q stderr %q", code, out, errs)
	}
	// The signal must come once b drains at the request, which it logs
	// ("draining") after it started watching for signals (a signal before
	// that starts the drain itself, which is fine too but not this case).
	proctest.WaitUntil(t, "b to drain at the request", 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		logs, _ := os.ReadFile(b.Log)
		return strings.Contains(string(logs), "asked to drain") && strings.Contains(string(logs), "msg=draining"), ""
	})
	b.Signal(t, syscall.SIGTERM)
	select {
	case <-b.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("b did not exit after its drain")
	}
	logs, _ := os.ReadFile(b.Log)
	if code := b.ExitCode(); code != 0 || !strings.Contains(string(logs), "the drain goes on") || strings.Contains(string(logs), "cut short") {
		t.Fatalf("b exited with %d; its log:\n%s", code, logs)
	}
}
