package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary act as the child-process servers, as the
// real binary does when started with --serve-sluice / --serve-nats.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "--serve-") {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
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
