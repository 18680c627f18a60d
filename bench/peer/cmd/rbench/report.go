package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/bench/peer"
)

const jsStream = "RBENCH"

// system is one cluster under test: its drivers (one per node) and its
// nodes' processes.
type system struct {
	drivers []bench.Driver
	procs   []bench.ProcStat
}

// bench3 starts both clusters, runs every setup alternately, prints the
// rows and the ratios, and stops every child process, also on failure.
func bench3(ctx context.Context, o options, stdout, stderr io.Writer) error {
	sl, err := startSluice3(ctx, o, stderr)
	if err != nil {
		return fmt.Errorf("sluice cluster: %w", err)
	}
	defer sl.stop()
	systems := map[string]system{}
	var slSys system
	for _, a := range sl.addrs {
		slSys.drivers = append(slSys.drivers, &bench.SluiceDriver{Addr: a, Window: o.window})
	}
	slSys.procs = sl.stats()
	systems["sluice"] = slSys
	if slices.Contains(o.setups, "js3") || slices.Contains(o.latSetups, "js3") {
		nt, err := startNATS3(ctx, o, stderr)
		if err != nil {
			return fmt.Errorf("nats cluster: %w", err)
		}
		defer nt.stop()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		remove, err := peer.CreateReplicatedStream(sctx, "nats://"+nt.addrs[0], jsStream, []string{"rb.js.>"}, 3)
		cancel()
		if err != nil {
			return err
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = remove(rctx)
			cancel()
		}()
		var js system
		for _, a := range nt.addrs {
			if o.jsSub == "stream" {
				js.drivers = append(js.drivers, peer.JetStreamStreamNode("nats://"+a, jsStream))
			} else {
				js.drivers = append(js.drivers, peer.JetStreamNode("nats://"+a))
			}
		}
		js.procs = nt.stats()
		systems["js"] = js
	}
	sysOf := func(setup string) system {
		if setup == "js3" {
			return systems["js"]
		}
		return systems["sluice"]
	}
	prefixOf := func(setup string) string {
		if setup == "js3" {
			return "rb.js."
		}
		return "rb.r" + setup[1:2] + "."
	}
	fmt.Fprintf(stdout, "# rbench: %d CPUs, %s, load generator pinned to %q, nodes to %q; %d publishers per node x 3 nodes, %d channels, window %d, %d B, %v per throughput run; latency at %.0f msg/s for %v; JetStream subscribers: %s\n",
		runtime.NumCPU(), runtime.Version(), o.ClientCPUs, o.ServerCPUs, o.pubsPerNode, o.channels, o.window, o.size, o.duration, o.rate, o.latDuration, o.jsSub)
	seq := 0
	one := func(setup string, run int, rate float64, dur time.Duration) row {
		seq++
		sys := sysOf(setup)
		w := workload{drivers: sys.drivers, procs: sys.procs, prefix: fmt.Sprintf("%srun%d", prefixOf(setup), seq),
			pubsPerNode: o.pubsPerNode, channels: o.channels, window: o.window, size: o.size, duration: dur, rate: rate}
		r := runLoad(ctx, w)
		r.Setup, r.Run = setup, run
		if rate > 0 {
			r.Setup = "lat-" + setup
		}
		printRow(stdout, r)
		return r
	}
	// A short warm-up per setup (streamlets opened, consumers created,
	// connections' buffers grown); not reported.
	for _, s := range union(o.setups, o.latSetups) {
		sys := sysOf(s)
		_ = runLoad(ctx, workload{drivers: sys.drivers, prefix: prefixOf(s) + "warm",
			pubsPerNode: 1, channels: o.channels, window: o.window, size: o.size, duration: 300 * time.Millisecond})
	}
	if err := printIdle(ctx, stdout, systems); err != nil {
		return err
	}
	printHeader(stdout)
	var rows []row
	// Throughput, then latency: each pass alternates its setups ABBA.
	for _, pass := range []struct {
		setups []string
		rate   float64
		dur    time.Duration
	}{{o.setups, 0, o.duration}, {o.latSetups, o.rate, o.latDuration}} {
		for r := range o.Runs {
			order := slices.Clone(pass.setups)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, s := range order {
				rows = append(rows, one(s, r+1, pass.rate, pass.dur))
			}
		}
	}
	printSummary(stdout, rows)
	for _, r := range rows {
		if r.Err != "" {
			return fmt.Errorf("run %s #%d: %s", r.Setup, r.Run, r.Err)
		}
	}
	return nil
}

// printIdle prints what each cluster's nodes spend with no load at all
// (membership, load reports, timers) over one second: the floor under
// every row's CPU figures.
func printIdle(ctx context.Context, w io.Writer, systems map[string]system) error {
	names := slices.Sorted(maps.Keys(systems))
	before := map[string][]time.Duration{}
	for _, n := range names {
		before[n] = cpuTimes(systems[n].procs)
	}
	start := time.Now()
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	wall := time.Since(start)
	var parts []string
	for _, n := range names {
		var sum time.Duration
		for i, c := range cpuTimes(systems[n].procs) {
			sum += c - before[n][i]
		}
		parts = append(parts, fmt.Sprintf("%s nodes %.1f%%", n, pct(sum, wall)))
	}
	fmt.Fprintf(w, "# idle (no clients, 1 s), cpu of one core: %s\n", strings.Join(parts, ", "))
	return nil
}

// union is a's setups, then b's not in a.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func printHeader(w io.Writer) {
	fmt.Fprintln(w, "| setup | run | acked msg/s | acked | failed | delivered | lost | dup | reordered | p50 | p99 | p99.9 | server cpu/msg | node cpu % | loadgen cpu % | load1 start-end | error |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
}

// pct is d as a percentage of one core over wall.
func pct(d, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return 100 * float64(d) / float64(wall)
}

func printRow(w io.Writer, r row) {
	p50, p99, p999 := "-", "-", "-"
	if r.Lat != nil {
		p50, p99, p999 = latStr(float64(r.Lat.P50)), latStr(float64(r.Lat.P99)), latStr(float64(r.Lat.P999))
	}
	nodes := make([]string, len(r.NodeCPU))
	for i, c := range r.NodeCPU {
		nodes[i] = fmt.Sprintf("%.0f", pct(c, r.Elapsed))
	}
	fmt.Fprintf(w, "| %s | %d | %.0f | %d | %d | %d | %d | %d | %d | %s | %s | %s | %v | %s | %.0f | %.2f-%.2f | %s |\n",
		r.Setup, r.Run, r.Rate, r.Acked, r.Failed, r.Delivered, r.Lost, r.Dup, r.Reorder, p50, p99, p999,
		r.ServerCPUPerMsg(), strings.Join(nodes, "/"), pct(r.GenCPU, r.Elapsed), r.Load1[0], r.Load1[1], r.Err)
}

// latStr formats a latency in ns to the microsecond.
func latStr(ns float64) string { return time.Duration(ns).Round(time.Microsecond).String() }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// printSummary prints, per setup, the medians over its runs (rate, server
// CPU per message, the CPU split, latency) and the ratios the issue aims
// at (N = 3 / JetStream R3 >= 3, N = 2 / N = 1 >= 0.5).
func printSummary(w io.Writer, rows []row) {
	type acc struct{ rate, cpuMsg, nodes, gen, p50, p99, p999, lost, dup, load []float64 }
	by := map[string]*acc{}
	var order []string
	for _, r := range rows {
		a := by[r.Setup]
		if a == nil {
			a = &acc{}
			by[r.Setup] = a
			order = append(order, r.Setup)
		}
		a.rate = append(a.rate, r.Rate)
		a.cpuMsg = append(a.cpuMsg, float64(r.ServerCPUPerMsg()))
		var sum time.Duration
		for _, c := range r.NodeCPU {
			sum += c
		}
		a.nodes = append(a.nodes, pct(sum, r.Elapsed))
		a.gen = append(a.gen, pct(r.GenCPU, r.Elapsed))
		a.lost = append(a.lost, float64(r.Lost))
		a.dup = append(a.dup, float64(r.Dup))
		a.load = append(a.load, r.Load1[0], r.Load1[1])
		if r.Lat != nil {
			a.p50 = append(a.p50, float64(r.Lat.P50))
			a.p99 = append(a.p99, float64(r.Lat.P99))
			a.p999 = append(a.p999, float64(r.Lat.P999))
		}
	}
	sum := func(v []float64) (t float64) {
		for _, x := range v {
			t += x
		}
		return t
	}
	fmt.Fprintln(w)
	for _, s := range order {
		a := by[s]
		fmt.Fprintf(w, "median %s (%d runs): %.0f acked msg/s; server cpu %v/msg; cpu %% of one core: 3 nodes %.0f, load generator %.0f",
			s, len(a.rate), median(a.rate), time.Duration(median(a.cpuMsg)), median(a.nodes), median(a.gen))
		if len(a.p50) > 0 {
			fmt.Fprintf(w, "; latency p50 %s p99 %s p99.9 %s", latStr(median(a.p50)), latStr(median(a.p99)), latStr(median(a.p999)))
		}
		fmt.Fprintf(w, "; lost %.0f, dup %.0f; load %.2f..%.2f\n", sum(a.lost), sum(a.dup), slices.Min(a.load), slices.Max(a.load))
	}
	m := func(s string) float64 {
		if a := by[s]; a != nil {
			return median(a.rate)
		}
		return 0
	}
	ratio := func(a, b, aim string) {
		if m(a) > 0 && m(b) > 0 {
			fmt.Fprintf(w, "ratio %s/%s: %.2f (aim %s)\n", a, b, m(a)/m(b), aim)
		}
	}
	ratio("n3", "js3", ">= 3")
	ratio("n2", "n1", ">= 0.5")
	ratio("n3", "n1", "-")
	if a, b := by["lat-n3"], by["lat-js3"]; a != nil && b != nil && len(a.p50) > 0 && len(b.p50) > 0 {
		fmt.Fprintf(w, "latency lat-n3/lat-js3: p50 %.2f, p99 %.2f (lower is better)\n",
			median(a.p50)/median(b.p50), median(a.p99)/median(b.p99))
	}
}
