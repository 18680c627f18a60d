package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/bench/peer"
)

const jsStream = "RBENCH"

// bench3 starts both clusters, runs every setup alternately, prints the
// rows and the ratios, and stops every child process, also on failure.
func bench3(ctx context.Context, o options, stdout, stderr io.Writer) error {
	sl, err := startSluice3(ctx, o, stderr)
	if err != nil {
		return fmt.Errorf("sluice cluster: %w", err)
	}
	defer sl.stop()
	var nt *cluster3
	var jsDrivers []bench.Driver
	if slices.Contains(o.setups, "js3") {
		if nt, err = startNATS3(ctx, stderr); err != nil {
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
		for _, a := range nt.addrs {
			jsDrivers = append(jsDrivers, peer.JetStreamNode("nats://"+a))
		}
	}
	var slDrivers []bench.Driver
	for _, a := range sl.addrs {
		slDrivers = append(slDrivers, &bench.SluiceDriver{Addr: a, Window: o.window})
	}
	fmt.Fprintf(stdout, "# rbench: %d CPUs, %s; %d publishers per node x 3 nodes, %d channels, window %d, %d B, %v per run\n",
		runtime.NumCPU(), runtime.Version(), o.pubsPerNode, o.channels, o.window, o.size, o.duration)
	seq := 0
	one := func(setup string, run int, rate float64, dur time.Duration) row {
		seq++
		w := workload{pubsPerNode: o.pubsPerNode, channels: o.channels, window: o.window, size: o.size, duration: dur, rate: rate}
		if setup == "js3" {
			w.drivers, w.prefix = jsDrivers, fmt.Sprintf("rb.js.run%d", seq)
		} else {
			w.drivers, w.prefix = slDrivers, fmt.Sprintf("rb.r%c.run%d", setup[1], seq)
		}
		r := runLoad(ctx, w)
		r.Setup, r.Run = setup, run
		if rate > 0 {
			r.Setup = "lat-" + setup
		}
		printRow(stdout, r)
		return r
	}
	// A short warm-up per setup (streamlets opened, connections' buffers
	// grown); not reported.
	for _, s := range o.setups {
		_ = runLoad(ctx, workload{drivers: pick(s, slDrivers, jsDrivers), prefix: "rb." + map[bool]string{true: "js", false: "r" + s[1:2]}[s == "js3"] + ".warm",
			pubsPerNode: 1, channels: o.channels, window: o.window, size: o.size, duration: 300 * time.Millisecond})
	}
	printHeader(stdout)
	var rows []row
	for r := range o.runs {
		order := slices.Clone(o.setups)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			rows = append(rows, one(s, r+1, 0, o.duration))
		}
	}
	if o.latency {
		lat := []string{"n1", "n3"}
		for r := range o.runs {
			order := slices.Clone(lat)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, s := range order {
				rows = append(rows, one(s, r+1, o.rate, o.latDuration))
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

func pick(s string, sl, js []bench.Driver) []bench.Driver {
	if s == "js3" {
		return js
	}
	return sl
}

func printHeader(w io.Writer) {
	fmt.Fprintln(w, "| setup | run | acked msg/s | acked | failed | delivered | lost | dup | reordered | p50 | p99 | load1 start-end | error |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
}

func printRow(w io.Writer, r row) {
	p50, p99 := "-", "-"
	if r.Lat != nil {
		p50, p99 = time.Duration(r.Lat.P50).String(), time.Duration(r.Lat.P99).String()
	}
	fmt.Fprintf(w, "| %s | %d | %.0f | %d | %d | %d | %d | %d | %d | %s | %s | %.2f-%.2f | %s |\n",
		r.Setup, r.Run, r.Rate, r.Acked, r.Failed, r.Delivered, r.Lost, r.Dup, r.Reorder, p50, p99, r.Load1[0], r.Load1[1], r.Err)
}

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

// printSummary prints the median rate per setup and the ratios the issue
// aims at (N = 3 / JetStream R3 >= 3, N = 2 / N = 1 >= 0.5).
func printSummary(w io.Writer, rows []row) {
	rates := map[string][]float64{}
	for _, r := range rows {
		if r.Lat == nil {
			rates[r.Setup] = append(rates[r.Setup], r.Rate)
		}
	}
	m := func(s string) float64 { return median(rates[s]) }
	fmt.Fprintln(w)
	for _, s := range []string{"n1", "n2", "n3", "js3"} {
		if len(rates[s]) > 0 {
			fmt.Fprintf(w, "median %s: %.0f acked msg/s\n", s, m(s))
		}
	}
	ratio := func(a, b, aim string) {
		if m(a) > 0 && m(b) > 0 {
			fmt.Fprintf(w, "ratio %s/%s: %.2f (aim %s)\n", a, b, m(a)/m(b), aim)
		}
	}
	ratio("n3", "js3", ">= 3")
	ratio("n2", "n1", ">= 0.5")
	ratio("n3", "n1", "-")
}
