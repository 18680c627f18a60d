package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

func report(out io.Writer, wd *world, rs []result, took time.Duration) {
	capTotal := 0.0
	for _, nd := range wd.nodes[:wd.initial] {
		capTotal += nd.cap
	}
	fmt.Fprintf(out, "\n## %d nodes (capacities 1,2,4 repeating; total %g), %d channels, %gs simulated, wall %.1fs\n\n",
		wd.initial, capTotal, len(wd.names), wd.cfg.duration, took.Seconds())
	fmt.Fprintf(out, "Indivisibility floor (best max/avg any placement can reach with the hottest streamlet on the largest node): committed %.3f, window %.3f\n\n",
		wd.floorCommitted, wd.floorWindow)
	fmt.Fprintf(out, "Granularity: the heaviest streamlet weighs %.3f x the fair share of a capacity-1 node (the bound is guaranteed satisfiable while this is <= eps = %g)\n\n",
		wd.heaviest, wd.cfg.eps)
	fmt.Fprintln(out, "Load balance, capacity-weighted, over all samples (worst = highest sampled value; mean = mean over samples). ns/decision: host() alone on the final state, thread CPU time on Linux:")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| scheme | committed max/avg worst | mean | committed p99/avg worst | window max/avg worst | mean | window p99/avg worst | ns/decision | decisions/s |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		var cw, cm, cp, ww, wm, wp float64
		for _, s := range r.samples {
			cw, cp = math.Max(cw, s.maxAvg), math.Max(cp, s.p99Avg)
			ww, wp = math.Max(ww, s.wMaxAvg), math.Max(wp, s.wP99Avg)
			cm += s.maxAvg
			wm += s.wMaxAvg
		}
		k := float64(len(r.samples))
		fmt.Fprintf(out, "| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.0f | %.2fM |\n",
			r.scheme, cw, cm/k, cp, ww, wm/k, wp, r.nsPerDecision, 1e3/r.nsPerDecision)
	}
	fmt.Fprintln(out)
	if len(rs) > 0 && len(rs[0].changes) > 0 {
		fmt.Fprintln(out, "Movement per membership change (fraction of channels; ideal = capacity share of the node that changed):")
		fmt.Fprintln(out)
		hdr, sep := "| scheme |", "|---|"
		for _, c := range rs[0].changes {
			hdr += fmt.Sprintf(" %s managers (ideal %.4f) | %s next streamlet |", c.kind, c.ideal, c.kind)
			sep += "---|---|"
		}
		fmt.Fprintln(out, hdr+" streamlets re-placed at failure |")
		fmt.Fprintln(out, sep+"---|")
		for _, r := range rs {
			line := "| " + r.scheme + " |"
			forced := 0.0
			for _, c := range r.changes {
				if math.IsNaN(c.mgrMoved) {
					line += " n/a |"
				} else {
					line += fmt.Sprintf(" %.4f |", c.mgrMoved)
				}
				line += fmt.Sprintf(" %.4f |", c.nextMoved)
				forced += c.forcedMoved
			}
			fmt.Fprintln(out, line+fmt.Sprintf(" %.4f |", forced))
		}
		fmt.Fprintln(out)
	}
	for _, r := range rs {
		if strings.HasPrefix(r.scheme, "ours") {
			fmt.Fprintf(out, "%s: %d placements, %d overflows (no node could take the streamlet within the bound; %d of them while filling the empty cluster at t=0), %d fallback scans, %.2f ring probes per decision\n",
				r.scheme, r.decisions, r.overflows, r.initialOverflows, r.fallbacks, r.meanProbes)
		}
	}
	// Over time: every sample, committed/window max/avg per scheme.
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Over time: capacity-weighted max/avg at each sample, committed / window (changes: the membership change during the window before the sample):")
	fmt.Fprintln(out)
	hdr, sep := "| t (s) | change |", "|---|---|"
	for _, r := range rs {
		hdr += " " + r.scheme + " |"
		sep += "---|"
	}
	fmt.Fprintln(out, hdr)
	fmt.Fprintln(out, sep)
	for k, smp := range rs[0].samples {
		what := ""
		for _, c := range wd.changes {
			if c.t > smp.t-wd.cfg.window && c.t <= smp.t {
				what += c.kind.String() + " "
			}
		}
		line := fmt.Sprintf("| %g | %s|", smp.t, what)
		for _, r := range rs {
			line += fmt.Sprintf(" %.2f / %.2f |", r.samples[k].maxAvg, r.samples[k].wMaxAvg)
		}
		fmt.Fprintln(out, line)
	}
}
