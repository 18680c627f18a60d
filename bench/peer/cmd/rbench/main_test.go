package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/bench/internal/benchcmd"
)

// TestMain lets the test binary act as the child-process nodes, as the
// real binary does when started with --serve-sluice-node / --serve-nats-node.
func TestMain(m *testing.M) {
	benchcmd.MainIfChild(run)
	os.Exit(m.Run())
}

// children lists the live processes whose parent is this one.
func children(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	me := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(me) {
			out = append(out, pid)
		}
	}
	return out
}

// TestHarnessTinyRun starts both 3-node clusters, runs every setup once
// for a moment, and checks that a row per setup (4 throughput, 3 latency)
// and the ratios come out, that nothing acknowledged was lost or
// duplicated, that every row has the nodes' CPU split and every latency
// row its percentiles, that the cluster secret reached the children only,
// and that every child process is gone afterwards. No speed is checked.
func TestHarnessTinyRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"--runs", "1", "--duration", "300ms", "--lat-duration", "300ms", "--rate", "500",
		"--pubs", "1", "--channels", "3", "--window", "64"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Split(line, "|")
		if len(f) < 18 || strings.TrimSpace(f[2]) != "1" {
			continue
		}
		setup := strings.TrimSpace(f[1])
		seen[setup] = true
		if lost, dup := strings.TrimSpace(f[7]), strings.TrimSpace(f[8]); lost != "0" || dup != "0" {
			t.Errorf("%s: lost %s, dup %s", setup, lost, dup)
		}
		if acked, _ := strconv.Atoi(strings.TrimSpace(f[4])); acked == 0 {
			t.Errorf("%s: nothing acknowledged", setup)
		}
		lat := strings.HasPrefix(setup, "lat-")
		for _, c := range f[10:13] {
			if d, err := time.ParseDuration(strings.TrimSpace(c)); lat && (err != nil || d <= 0) {
				t.Errorf("%s: latency column %q", setup, c)
			} else if !lat && strings.TrimSpace(c) != "-" {
				t.Errorf("%s: a throughput row with latency %q", setup, c)
			}
		}
		if d, err := time.ParseDuration(strings.TrimSpace(f[13])); err != nil || d <= 0 {
			t.Errorf("%s: server cpu/msg %q", setup, f[13])
		}
		if nodes := strings.Split(strings.TrimSpace(f[14]), "/"); len(nodes) != 3 {
			t.Errorf("%s: node cpu %q, want 3 nodes", setup, f[14])
		}
	}
	for _, s := range []string{"n1", "n2", "n3", "js3", "lat-n1", "lat-n3", "lat-js3"} {
		if !seen[s] {
			t.Errorf("no row %s in:\n%s", s, out.String())
		}
	}
	for _, want := range []string{"ratio n3/js3", "ratio n2/n1", "latency lat-n3/lat-js3", "median lat-js3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	if _, ok := os.LookupEnv(secretEnv); ok {
		t.Errorf("%s set in the load generator's own environment", secretEnv)
	}
	if c := children(t); len(c) != 0 {
		t.Fatalf("child processes left running: %v", c)
	}
}

// TestStart3RetriesANodeThatExits: a node that cannot bind its gossip
// port (taken, as by another process after bench.FreePort gave it out)
// exits; start3 reports that at once, not after its 30 s wait, and starts
// the cluster again on fresh ports.
func TestStart3RetriesANodeThatExits(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	tries := 0
	var retryAt time.Duration // from start to the second try
	start := time.Now()
	k := sluiceNodes
	k.spec = func(i int, name string, clients, peers []string) string {
		if i == 0 {
			if tries++; tries == 2 {
				retryAt = time.Since(start)
			}
		}
		if tries == 1 && i == 1 {
			peers = slices.Clone(peers)
			peers[1] = taken.Addr().String()
		}
		return sluiceNodes.spec(i, name, clients, peers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var log bytes.Buffer
	c, err := start3(ctx, options{}, k, []string{secretEnv + "=" + strings.Repeat("ab", 32)}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	c.stop()
	if tries != 2 {
		t.Fatalf("%d tries, want 2 (the first with node b's port taken)\n%s", tries, log.String())
	}
	if !strings.Contains(log.String(), "starting the sluice cluster again") {
		t.Fatalf("no retry reported:\n%s", log.String())
	}
	if retryAt >= 30*time.Second {
		t.Fatalf("retried after %v: the exit was not noticed before the 30 s ready wait ran out", retryAt)
	}
	if ch := children(t); len(ch) != 0 {
		t.Fatalf("child processes left running: %v", ch)
	}
}
