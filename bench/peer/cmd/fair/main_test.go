package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/bench"
)

// TestParse: flags select rows, states and regimes; unknown ones are
// refused.
func TestParse(t *testing.T) {
	o, err := parse([]string{"--rows", "pubsub128,latency", "--states", "steady", "--regimes", "live", "--pairs", "7"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.rows) != 2 || o.rows[0].key != "pubsub128" || o.rows[1].key != "latency" || o.pairs != 7 ||
		!slices.Equal(o.states, []string{"steady"}) || !o.regimes[regimeLive] || o.regimes[regimeOverload] {
		t.Fatalf("%+v", o)
	}
	for _, bad := range [][]string{{"--rows", "nope"}, {"--states", "warm"}, {"--regimes", "calm"}, {"--pairs", "0"}, {"extra"}} {
		if _, err := parse(bad, io.Discard); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
}

// TestRowConfigs: every row's workload is a valid bench configuration in
// each of its regimes; live runs have a window of 1 MiB of payload (at
// least 64 messages), overload runs none; latency runs record after a
// warm-up; the headline rows receive with Next.
func TestRowConfigs(t *testing.T) {
	all := map[regime]bool{regimeLive: true, regimeOverload: true}
	for _, r := range rows {
		for _, g := range r.regimes(all) {
			name, c, err := r.config(g, 1)
			if err != nil {
				t.Fatal(err)
			}
			sc, err := bench.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sc.Normalize(c); err != nil {
				t.Fatalf("%s %s: %v", r.key, g, err)
			}
			switch {
			case g == regimeLive && c.Live != max(64, (1<<20)/c.Size):
				t.Fatalf("%s live window %d", r.key, c.Live)
			case g == regimeOverload && c.Live != 0:
				t.Fatalf("%s overload with a window", r.key)
			case name == "latency" && (c.Warmup <= 0 || c.Warmup >= c.Duration):
				t.Fatalf("latency warm-up %v of %v", c.Warmup, c.Duration)
			}
		}
		if !strings.Contains(r.key, "-") || r.key == "chan10k-conns" || r.key == "chan10k-subs" {
			if r.recv != bench.RecvNext {
				t.Fatalf("headline row %s receives with %v", r.key, r.recv)
			}
		}
	}
}

// TestServersAtDefaults: the servers' command lines give the address only.
func TestServersAtDefaults(t *testing.T) {
	s := &server{name: "sluice", bin: "sluice"}
	if got := s.argv("127.0.0.1:5"); !slices.Equal(got, []string{"sluice", "serve", "--listen", "127.0.0.1:5"}) {
		t.Fatalf("sluice %v", got)
	}
	n := &server{name: "nats", bin: "nats-server"}
	if got := n.argv("127.0.0.1:5"); !slices.Equal(got, []string{"nats-server", "-a", "127.0.0.1", "-p", "5"}) {
		t.Fatalf("nats %v", got)
	}
}

// TestFairEndToEnd builds both servers and runs one row with tiny counts
// in both states and regimes: every run present, in ABBA order within a
// pair, complete, and the table printed.
func TestFairEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sluice and nats-server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	js := filepath.Join(dir, "out.json")
	var out, errb bytes.Buffer
	code := run(ctx, []string{"--rows", "pubsub128", "--pairs", "2", "--scale", "0.0005", "--fill", "1048576",
		"--dir", dir, "--json", js, "--markdown"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Header  []string       `json:"header"`
		Results []bench.Result `json:"results"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 16 {
		t.Fatalf("%d results, want 16 (2 states x 2 regimes x 2 pairs x 2 systems)", len(rep.Results))
	}
	for i, r := range rep.Results {
		// measure returns each cell's Sluice runs, then its NATS runs.
		want := "sluice"
		if i%4 >= 2 {
			want = "nats"
		}
		if r.System != want || r.Err != "" || r.Delivered != r.Expected || r.Delivered == 0 {
			t.Fatalf("result %d: %s %+v", i, want, r)
		}
	}
	for c := 0; c < len(rep.Results); c += 4 {
		s1, s2, n1, n2 := rep.Results[c], rep.Results[c+1], rep.Results[c+2], rep.Results[c+3]
		// ABBA: Sluice, NATS, then NATS, Sluice.
		if !s1.Started.Before(n1.Started) || !n1.Started.Before(n2.Started) || !n2.Started.Before(s2.Started) {
			t.Fatalf("cell %d not in ABBA order: %v %v %v %v", c/4, s1.Started, n1.Started, n2.Started, s2.Started)
		}
	}
	if !strings.Contains(strings.Join(rep.Header, "\n"), "no JetStream") ||
		!strings.Contains(out.String(), "| 1:1 128 B | steady | overload |") {
		t.Fatalf("report:\n%s\n%s", rep.Header, out.String())
	}
}
