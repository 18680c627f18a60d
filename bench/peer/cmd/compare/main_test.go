package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/bench/internal/benchcmd"
)

// TestMain lets the test binary act as the child-process servers, as the
// real binary does when started with --serve-sluice / --serve-nats.
func TestMain(m *testing.M) {
	benchcmd.MainIfChild(run)
	os.Exit(m.Run())
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestCompareChildProcesses runs a tiny comparison with both servers as
// child processes and checks the JSON report: every run present, runs
// alternated, a ratio per scenario, server CPU from the children.
func TestCompareChildProcesses(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(testCtx(t), []string{"--json", "--runs", "2", "--count", "2000", "pubsub/size=16", "replay/count=3000"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(rep.Results) != 8 || len(rep.Comparisons) != 2 {
		t.Fatalf("%d results, %d comparisons", len(rep.Results), len(rep.Comparisons))
	}
	wantOrder := []string{"sluice", "nats", "nats", "sluice", "sluice", "nats-js", "nats-js", "sluice"}
	for i, r := range rep.Results {
		if r.System != wantOrder[i] {
			t.Fatalf("run %d on %s, want %s (ABBA order)", i, r.System, wantOrder[i])
		}
		if r.Err != "" || r.Delivered != r.Expected || r.Delivered == 0 {
			t.Fatalf("run %d: %+v", i, r)
		}
		if !strings.Contains(r.CPUSource, "server process only") {
			t.Fatalf("run %d: cpu source %q", i, r.CPUSource)
		}
	}
	for _, c := range rep.Comparisons {
		if c.Ratio <= 0 || c.System[0] != "sluice" || !strings.HasPrefix(c.System[1], "nats") {
			t.Fatalf("comparison %+v", c)
		}
	}
	if !strings.Contains(rep.Machine["nats_server"], "2.15.2") {
		t.Fatalf("machine %v", rep.Machine)
	}
}

func TestCompareInProcessTable(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(testCtx(t), []string{"--server", "inproc", "--runs", "1", "--count", "1000", "--markdown", "pub/size=16"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"# nproc:", "pub 16B", "ratio sluice/nats", "in-process", "### pub 16B", "| server CPU per message |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestCompareRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--runs", "0"},
		{"--server", "cloud"},
		{"--only", "redis"},
		{"--server", "inproc", "--server-cpus", "0"},
		{"--client-cpus", "x"},
		{"--json", "--markdown"},
	} {
		var out, errb bytes.Buffer
		if code := run(testCtx(t), args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	var out, errb bytes.Buffer
	if code := run(testCtx(t), []string{"--only", "sluice", "nope"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "unknown scenario") {
		t.Errorf("unknown scenario: exit %d, %s", code, errb.String())
	}
}

// TestIdleRunsOnFreshServers: each idle run measures a newly started
// server process (memory deltas from a clean process).
func TestIdleRunsOnFreshServers(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(testCtx(t), []string{"--json", "--runs", "2", "idle/conns=20"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	src := map[string][]string{}
	for _, r := range rep.Results {
		if r.Err != "" || r.Conns != 20 {
			t.Fatalf("%+v", r)
		}
		src[r.System] = append(src[r.System], r.CPUSource)
	}
	for sys, s := range src {
		if len(s) != 2 || s[0] == s[1] || s[0] == "" {
			t.Errorf("%s: server processes %q, want two different ones", sys, s)
		}
	}
}

func TestParseJob(t *testing.T) {
	for _, tc := range []struct {
		spec   string
		peer   string
		target float64
		name   string
		size   int
		busy   bool
		bad    bool
	}{
		{spec: "pubsub/size=1024,peer=relay,target=0.5", peer: "relay", target: 0.5, name: "pubsub", size: 1024},
		{spec: "latency/size=128,busy=true,target=0.8", peer: "nats", target: 0.8, name: "latency", size: 128, busy: true},
		{spec: "fanout", peer: "nats", name: "fanout"},
		{spec: "pubsub/peer=redis", bad: true},
		{spec: "pubsub/target=-1", bad: true},
		{spec: "replay/peer=relay", bad: true},
		{spec: "pubsub/size=x", bad: true},
	} {
		j, err := parseJob(tc.spec, bench.Config{})
		if tc.bad {
			if err == nil {
				t.Errorf("%s: accepted", tc.spec)
			}
			continue
		}
		if err != nil || j.peer != tc.peer || j.target != tc.target || j.name != tc.name || j.cfg.Size != tc.size || j.cfg.Busy != tc.busy {
			t.Errorf("%s: %+v, %v", tc.spec, j, err)
		}
	}
	for _, s := range defaultSuite {
		if _, err := parseJob(s, bench.Config{}); err != nil {
			t.Errorf("default suite: %v", err)
		}
	}
}

func TestSummaryMet(t *testing.T) {
	one := []bench.Result{{}}
	for _, tc := range []struct {
		ratio, target float64
		higher        bool
		lost          int64
		want          string
	}{
		{2.1, 2, true, 0, "yes"},
		{1.9, 2, true, 0, "no"},
		{2.1, 2, true, 5, "no (loss)"},
		{0.7, 0.8, false, 0, "yes"},
		{0.9, 0.8, false, 0, "no"},
		{0.9, 0, false, 0, "-"},
	} {
		r := summaryRow{c: bench.Comparison{A: one, B: one, Ratio: tc.ratio, HigherBetter: tc.higher, LostA: tc.lost}, target: tc.target}
		if got := r.met(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc, got, tc.want)
		}
	}
}

// TestCompareRelayAndBusy: a relay comparison and a latency run under the
// tool's own CPU load both run, in the summary table with their targets.
func TestCompareRelayAndBusy(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(testCtx(t), []string{"--runs", "1", "--count", "3000", "--markdown", "--progress", "off",
		"pubsub/size=1024,peer=relay,target=0.5", "latency/size=128,rate=2000,duration=300ms,busy=true,target=0.8"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"| pubsub 1:1 1KiB | relay |", ">= 0.5", "| latency @2.0k/s 128B +cpu load | nats |", "<= 0.8",
		"ratio sluice/relay", "relay_server: raw byte relay", "sluice lost"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
