package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/bench"
)

func TestBenchRunsScenariosAndPrintsJSON(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(ctxE2E(t), stdio{out: &out, err: &errb}, []string{"bench", "--server-mode", "inproc", "--json",
		"pubsub/count=2000", "fanout/subs=3,count=500,size=16"})
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	var rs []bench.Result
	if err := json.Unmarshal(out.Bytes(), &rs); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(rs) != 2 || rs[0].Scenario != "pubsub" || rs[0].Delivered != 2000 || rs[1].Delivered != 1500 || rs[1].Config.Size != 16 {
		t.Fatalf("results %+v", rs)
	}
	if rs[0].CPUSource == "" {
		t.Errorf("no server CPU source for an in-process server")
	}
}

func TestBenchAgainstRunningServerPrintsTable(t *testing.T) {
	addr := startEngine(t)
	var out, errb bytes.Buffer
	code := run(ctxE2E(t), stdio{out: &out, err: &errb}, []string{"bench", "ack-sync", "--count", "100", "--server", addr})
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	for _, want := range []string{"ack-sync 128B", "sluice", "p99", "go run ./cmd/compare ack-sync"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBenchRejectsBadCommandLines(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "nope"},
		{"bench", "pub/size=x"},
		{"bench", "pub", "--runs", "0"},
		{"bench", "pub", "--server-mode", "cloud"},
		{"bench", "pub", "--server-mode", "inproc", "--server-cpus", "0"},
		{"bench", "pub", "--client-cpus", "z"},
		{"bench", "latency/size=4"},
	} {
		var out, errb bytes.Buffer
		if code := run(ctxE2E(t), stdio{out: &out, err: &errb}, args); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
	}
	var out, errb bytes.Buffer
	if code := run(ctxE2E(t), stdio{out: &out, err: &errb}, []string{"bench", "--help"}); code != exitOK ||
		!strings.Contains(out.String(), "go run ./cmd/compare") || !strings.Contains(out.String(), "pub/size=16 pubsub/size=128") {
		t.Fatalf("help: exit %d\n%s", code, out.String())
	}
}

// TestBenchFailsWhenServerUnreachable: a run that cannot measure anything
// (nothing listens on port 1) exits 1 and says why in the notes.
func TestBenchFailsWhenServerUnreachable(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(ctxE2E(t), stdio{out: &out, err: &errb}, []string{"bench", "pub/count=10", "--server", "127.0.0.1:1"})
	if code != exitFail || !strings.Contains(out.String(), "note: pub 128B on sluice") {
		t.Fatalf("exit %d, out %s, err %s", code, out.String(), errb.String())
	}
}
