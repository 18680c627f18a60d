package main

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary act as the child-process nodes, as the
// real binary does when started with --serve-sluice-node / --serve-nats-node.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "--serve-") {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
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
// for a moment, and checks that a row per setup and the ratios come out,
// that nothing acknowledged was lost or duplicated, and that every child
// process is gone afterwards. No speed is checked.
func TestHarnessTinyRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"--runs", "1", "--duration", "300ms", "--lat-duration", "300ms", "--rate", "500",
		"--pubs", "1", "--channels", "3", "--window", "64"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	rows := 0
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Split(line, "|")
		if len(f) < 14 || strings.TrimSpace(f[2]) != "1" {
			continue
		}
		rows++
		setup := strings.TrimSpace(f[1])
		if lost, dup := strings.TrimSpace(f[7]), strings.TrimSpace(f[8]); lost != "0" || dup != "0" {
			t.Errorf("%s: lost %s, dup %s", setup, lost, dup)
		}
		if acked, _ := strconv.Atoi(strings.TrimSpace(f[4])); acked == 0 {
			t.Errorf("%s: nothing acknowledged", setup)
		}
		if strings.HasPrefix(setup, "lat-") && strings.TrimSpace(f[10]) == "-" {
			t.Errorf("%s: no latency", setup)
		}
	}
	if rows != 6 {
		t.Fatalf("%d rows, want 6:\n%s", rows, out.String())
	}
	for _, want := range []string{"ratio n3/js3", "ratio n2/n1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	if c := children(t); len(c) != 0 {
		t.Fatalf("child processes left running: %v", c)
	}
}
