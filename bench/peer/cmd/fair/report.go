package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluice-rtm/sluice/bench"
)

// fmtValue formats a headline value in its unit.
func fmtValue(v float64, unit string) string {
	switch {
	case v == 0:
		return "-"
	case unit == "p99":
		return fmtLatency(v)
	case strings.HasPrefix(unit, "B/"):
		return fmt.Sprintf("%.0f B", v)
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtLatency(ns float64) string {
	d := time.Duration(ns)
	if d >= time.Millisecond {
		return fmt.Sprintf("%.2f ms", ns/1e6)
	}
	return fmt.Sprintf("%.0f us", ns/1e3)
}

// fmtSide is a side's median and range.
func fmtSide(p bench.Paired, side int) string {
	if p.Median[side] == 0 {
		return "-"
	}
	return fmt.Sprintf("%s [%s-%s]", fmtValue(p.Median[side], p.Unit), fmtValue(p.Range[side][0], p.Unit), fmtValue(p.Range[side][1], p.Unit))
}

// fmtRatio is the median pair ratio and its range.
func fmtRatio(p bench.Paired) string {
	if len(p.Ratios) == 0 {
		return "-"
	}
	return fmt.Sprintf("**%.2f** [%.2f-%.2f]", p.Ratio, p.RatioRange[0], p.RatioRange[1])
}

// fmtLost is a side's losses: lost deliveries, the announced part, the
// subscriptions ended (disconnects).
func fmtLost(p bench.Paired, side int, rows []bench.Result) string {
	s := fmt.Sprint(p.Lost[side])
	if p.Announced[side] > 0 {
		s += fmt.Sprintf(" (%d announced)", p.Announced[side])
	}
	if p.Ended[side] > 0 {
		s += fmt.Sprintf(", %d disconnected", p.Ended[side])
	}
	if p.Errors[side] > 0 {
		s += fmt.Sprintf(", %d runs failed", p.Errors[side])
	}
	return s
}

// targetCell says the row's target and whether the pairs' median meets it
// with nothing lost on Sluice's side; targets apply to the live regime
// and to rows without regimes (issue 27: "with nothing lost").
func targetCell(c cell) (target, met string) {
	if c.row.target == 0 || c.regime == regimeOverload || len(c.p.Ratios) == 0 {
		return "-", "-"
	}
	ok := c.p.Ratio >= c.row.target
	op := ">="
	if !c.p.HigherBetter {
		ok, op = c.p.Ratio <= c.row.target, "<="
	}
	switch {
	case ok && c.p.Lost[0] == 0 && c.p.Errors[0] == 0:
		return fmt.Sprintf("%s %.2g", op, c.row.target), "yes"
	case ok:
		return fmt.Sprintf("%s %.2g", op, c.row.target), "no (loss)"
	}
	return fmt.Sprintf("%s %.2g", op, c.row.target), "no"
}

// plainLine is one cell as a line of text.
func plainLine(c cell) string {
	p := c.p
	return fmt.Sprintf("%s | %s | %s | sluice %s | nats %s | ratio %s | lost %s / %s | spread %.2f | overload %.1fs/%.1fs | load %.1f-%.1f",
		c.row.name, c.state, c.regime, fmtSide(p, 0), fmtSide(p, 1), strings.ReplaceAll(fmtRatio(p), "**", ""),
		fmtLost(p, 0, nil), fmtLost(p, 1, nil), p.Spread(), p.Overload[0], p.Overload[1], p.Load1[0], p.Load1[1])
}

// writeMarkdown writes the fair table and its notes.
func writeMarkdown(w io.Writer, cells []cell, head []string, o options) {
	fmt.Fprintln(w, "| row | state | regime | Sluice | NATS | Sluice/NATS (paired) | target | met | Sluice lost | NATS lost | Sluice spread | overload s (S/N) | load |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
	for _, c := range cells {
		p := c.p
		target, met := targetCell(c)
		over := "-"
		if c.regime == regimeOverload {
			over = fmt.Sprintf("%.0f / %.0f", p.Overload[0], p.Overload[1])
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %s | %.1f-%.1f |\n",
			c.row.name, c.state, c.regime, fmtSide(p, 0), fmtSide(p, 1), fmtRatio(p), target, met,
			fmtLost(p, 0, nil), fmtLost(p, 1, nil), p.Spread(), over, p.Load1[0], p.Load1[1])
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%d alternated pairs per cell (ABBA). Throughput in delivered messages/s (publish only: published/s); "+
		"latency: p99 publish-to-delivery at 50,000 msg/s, stamped at the due time, first %v of %v not recorded. "+
		"Sluice/NATS (paired): median of the pairs' ratios [min-max]. Sluice spread: max(max/median, median/min) of Sluice's runs. "+
		"Lost: deliveries expected and not received, summed over the runs (announced: GAP / slow-consumer drops); "+
		"disconnected: subscriptions the server ended. Overload s: the shortest time, over the runs, "+
		"a subscriber's backlog was past %d MiB. Load: 1-minute load average over the cell's runs.\n\n",
		o.pairs, latencyWarmup, latencyDuration, overMark>>20)
	for _, l := range head {
		fmt.Fprintf(w, "%s  \n", l)
	}
	for _, c := range cells {
		if c.row.note != "" && c.state == o.states[0] {
			fmt.Fprintf(w, "\n%s: %s.", c.row.name, c.row.note)
		}
	}
	fmt.Fprintln(w)
	writeDerived(w, cells)
}

// writeDerived writes the ratios between cells the issue asks about:
// Sluice's steady-state latency against its fresh latency, and the
// default receive path against SubscribeFunc.
func writeDerived(w io.Writer, cells []cell) {
	find := func(key, state string, g regime) *cell {
		for i := range cells {
			if cells[i].row.key == key && cells[i].state == state && cells[i].regime == g {
				return &cells[i]
			}
		}
		return nil
	}
	if f, s := find("latency", "fresh", regimeOnce), find("latency", "steady", regimeOnce); f != nil && s != nil && f.p.Median[0] > 0 {
		fmt.Fprintf(w, "\nSluice p99 right after a history fill / fresh: %.2f (medians %s / %s; NATS %.2f).\n",
			s.p.Median[0]/f.p.Median[0], fmtLatency(s.p.Median[0]), fmtLatency(f.p.Median[0]), s.p.Median[1]/max(f.p.Median[1], 1))
	}
	for _, state := range []string{"fresh", "steady"} {
		n, fn := find("pubsub128", state, regimeLive), find("pubsub128-func", state, regimeLive)
		if n != nil && fn != nil && n.p.Median[0] > 0 {
			fmt.Fprintf(w, "\nSluice 1:1 128 B live, %s: Subscribe+Next delivers %.2f of SubscribeFunc's rate (%s against %s).\n",
				state, n.p.Median[0]/fn.p.Median[0], fmtValue(n.p.Median[0], n.p.Unit), fmtValue(fn.p.Median[0], fn.p.Unit))
		}
	}
}

// runLine is one run's summary for the progress log.
func runLine(r bench.Result) string {
	v, unit, _ := r.Headline()
	s := fmt.Sprintf("%s %s, lost %d (announced %d, ended %d), overload %.1fs, backlog max %d MiB, load %.1f->%.1f",
		fmtValue(v, unit), unit, r.Lost(), r.Dropped, r.SubsEnded, r.Overload.Seconds(), r.MaxBacklog>>20, r.Load1[0], r.Load1[1])
	if r.CPUPerMsgNs > 0 {
		s += fmt.Sprintf(", server cpu %.0f ns/msg, rss %d MiB", r.CPUPerMsgNs, r.ServerRSS>>20)
	}
	if r.Err != "" {
		s += ", error: " + r.Err
	}
	return s
}
