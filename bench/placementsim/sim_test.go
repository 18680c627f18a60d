package main

import (
	"math"
	"testing"
)

func smallConfig() config {
	return config{channels: 5000, duration: 6, window: 1, seed: 7, zipf: 1.1, load: 1e6, eps: 0.25,
		changes: []changeKind{join, drain, fail}, workers: 1}
}

func TestRunIsDeterministic(t *testing.T) {
	cfg := smallConfig()
	a, b := newWorld(cfg, 12), newWorld(cfg, 12)
	sa, sb := newSchemes(a), newSchemes(b)
	for i := range sa {
		ra, rb := run(a, sa[i]), run(b, sb[i])
		if len(ra.samples) != len(rb.samples) || len(ra.samples) != 6 {
			t.Fatalf("%s: %d vs %d samples", ra.scheme, len(ra.samples), len(rb.samples))
		}
		for k := range ra.samples {
			if ra.samples[k] != rb.samples[k] {
				t.Fatalf("%s sample %d: %+v vs %+v", ra.scheme, k, ra.samples[k], rb.samples[k])
			}
		}
	}
}

func TestOursHoldsTheBoundAndBaselinesDoNot(t *testing.T) {
	cfg := smallConfig()
	wd := newWorld(cfg, 20)
	worst := map[string]float64{}
	for _, sc := range newSchemes(wd) {
		r := run(wd, sc)
		for _, s := range r.samples {
			worst[r.scheme] = math.Max(worst[r.scheme], s.maxAvg)
		}
		if r.scheme == "ours" && r.overflows != r.initialOverflows {
			t.Errorf("ours overflowed after the initial fill: %d of %d", r.overflows-r.initialOverflows, r.overflows)
		}
	}
	if worst["ours"] > 1+cfg.eps+0.01 {
		t.Errorf("ours: worst committed max/avg %.3f above 1+e", worst["ours"])
	}
	if worst["ring-channel"] < 1+cfg.eps {
		t.Errorf("ring-channel: worst %.3f; the Zipf load should overload plain ring hashing", worst["ring-channel"])
	}
}

func TestManagerMovementNearCapacityShare(t *testing.T) {
	cfg := smallConfig()
	cfg.channels = 20000
	cfg.changes = []changeKind{join}
	wd := newWorld(cfg, 10)
	r := run(wd, &oursScheme{w: wd, eps: cfg.eps, choices: 2})
	c := r.changes[0]
	if math.Abs(c.mgrMoved-c.ideal) > 0.3*c.ideal {
		t.Fatalf("join moved %.4f of managers, ideal %.4f", c.mgrMoved, c.ideal)
	}
}

func TestParseConfig(t *testing.T) {
	if _, err := parseConfig(nil); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cfg, err := parseConfig([]string{"-full"})
	if err != nil || cfg.channels != 1000000 || cfg.duration != 60 {
		t.Fatalf("-full: %+v %v", cfg, err)
	}
	for _, args := range [][]string{
		{"-nodes", "2"}, {"-nodes", "x"}, {"-channels", "0"}, {"-window", "5", "-duration", "2"},
		{"-eps", "0"}, {"-changes", "explode"}, {"-load", "-1"},
	} {
		if _, err := parseConfig(args); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
