package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is what one run measured. Rates are per second over the measured
// phase; zero fields were not measured by that scenario.
type Result struct {
	System   string    `json:"system"`
	Scenario string    `json:"scenario"`
	Config   Config    `json:"config"`
	Started  time.Time `json:"started"` // when Run began

	Published int64         `json:"published"`        // messages published (acknowledged ones for ack-*)
	Elapsed   time.Duration `json:"elapsed_ns"`       // publishing phase (replay: the reading phase; PubRate is the fill rate)
	PubRate   float64       `json:"pub_msgs_per_sec"` // Published / Elapsed
	MBps      float64       `json:"mb_per_sec"`       // payload megabytes (1e6) per second

	Expected       int64         `json:"expected,omitempty"`   // deliveries expected
	Delivered      int64         `json:"delivered,omitempty"`  // deliveries received
	Dropped        int64         `json:"dropped,omitempty"`    // deliveries the system reported skipped
	SubsEnded      int64         `json:"subs_ended,omitempty"` // subscriptions the system ended early
	SubErr         string        `json:"sub_error,omitempty"`  // why the first of them ended
	DeliverElapsed time.Duration `json:"deliver_elapsed_ns,omitempty"`
	DeliverRate    float64       `json:"delivered_msgs_per_sec,omitempty"`
	// Overload is how long the backlog per subscriber exceeded
	// Config.OverMark; MaxBacklog the largest backlog per subscriber, in
	// payload bytes (throughput scenarios with subscribers).
	Overload   time.Duration `json:"overload_ns,omitempty"`
	MaxBacklog int64         `json:"max_backlog_bytes,omitempty"`

	Latency    *LatencySummary `json:"latency,omitempty"`
	MaxSendLag time.Duration   `json:"max_send_lag_ns,omitempty"` // latency: worst publisher lag behind schedule

	Conns    int64   `json:"conns,omitempty"`         // idle: connections opened
	ConnRate float64 `json:"conns_per_sec,omitempty"` // idle: connections per second

	ServerCPU   time.Duration `json:"server_cpu_ns,omitempty"`
	CPUPerMsgNs float64       `json:"server_cpu_per_msg_ns,omitempty"`
	CPUSource   string        `json:"server_cpu_source,omitempty"`
	ServerRSS   int64         `json:"server_rss_bytes,omitempty"`
	MemPerConn  float64       `json:"server_bytes_per_conn,omitempty"`

	// Load1 is the machine's 1-minute load average (/proc/loadavg) at the
	// start and at the end of the run: how busy the machine was besides.
	Load1 [2]float64 `json:"load1"`

	Err string `json:"error,omitempty"` // why the run failed or is incomplete
}

// Lost is the number of expected deliveries that did not arrive: messages
// published but not delivered, including those the system announced as
// skipped (Dropped: GAP ranges, slow-consumer drops).
func (r Result) Lost() int64 {
	if r.Expected <= r.Delivered {
		return 0
	}
	return r.Expected - r.Delivered
}

// Headline returns the scenario's main number, its unit and whether higher
// is better: delivered msg/s for scenarios with subscribers, published
// msg/s otherwise, p99 latency for latency, bytes per connection for idle.
func (r Result) Headline() (value float64, unit string, higherBetter bool) {
	switch r.Scenario {
	case "latency":
		if r.Latency == nil {
			return 0, "p99", false
		}
		return float64(r.Latency.P99), "p99", false
	case "idle":
		return r.MemPerConn, "B/conn", false
	case "pub", "ack-sync", "ack-async":
		return r.PubRate, "msg/s", true
	}
	return r.DeliverRate, "msg/s delivered", true
}

// Label is a short description of the run's shape, e.g. "fanout 1:100 128B".
func (r Result) Label() string {
	c := r.Config
	switch r.Scenario {
	case "pub", "ack-sync", "ack-async":
		if c.Pubs > 1 {
			return fmt.Sprintf("%s x%d %s", r.Scenario, c.Pubs, sizeName(c.Size))
		}
		return fmt.Sprintf("%s %s", r.Scenario, sizeName(c.Size))
	case "pubsub", "fanout":
		return fmt.Sprintf("%s %d:%d %s", r.Scenario, c.Pubs, c.Subs, sizeName(c.Size))
	case "nm":
		return fmt.Sprintf("nm %d:%d/%dch %s", c.Pubs, c.Subs, c.Channels, sizeName(c.Size))
	case "latency":
		if c.Subs > 1 {
			return fmt.Sprintf("latency 1:%d @%s/s %s", c.Subs, humanCount(c.Rate), sizeName(c.Size))
		}
		if c.Busy {
			return fmt.Sprintf("latency @%s/s %s +cpu load", humanCount(c.Rate), sizeName(c.Size))
		}
		return fmt.Sprintf("latency @%s/s %s", humanCount(c.Rate), sizeName(c.Size))
	case "replay":
		return fmt.Sprintf("replay %s %s", humanCount(float64(c.Count)), sizeName(c.Size))
	case "idle":
		return fmt.Sprintf("idle %s conns", humanCount(float64(c.Conns)))
	}
	return r.Scenario
}

// fmtLoad formats a run's load averages as "start->end".
func fmtLoad(l [2]float64) string { return fmt.Sprintf("%.2f->%.2f", l[0], l[1]) }

func sizeName(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

// fmtDur formats nanoseconds as us or ms with 3 significant digits.
func fmtDur(ns int64) string {
	d := float64(ns)
	switch {
	case d >= 1e9:
		return fmt.Sprintf("%.3gs", d/1e9)
	case d >= 1e6:
		return fmt.Sprintf("%.3gms", d/1e6)
	}
	return fmt.Sprintf("%.3gus", d/1e3)
}

// WriteTable writes rs as an aligned text table.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tsystem\tpublished/s\tdelivered/s\tMB/s\tp50\tp99\tp99.9\tmax\tcpu/msg\tlost\tof which gap\tload1\t")
	for _, r := range rs {
		lat := []string{"-", "-", "-", "-"}
		if r.Latency != nil {
			l := r.Latency
			lat = []string{fmtDur(l.P50), fmtDur(l.P99), fmtDur(l.P999), fmtDur(l.Max)}
		}
		deliv, loss, gap := "-", "-", "-"
		if r.Expected > 0 {
			deliv = humanCount(r.DeliverRate)
			loss, gap = fmt.Sprintf("%d", r.Lost()), fmt.Sprintf("%d", r.Dropped)
		}
		pub := humanCount(r.PubRate)
		if r.Scenario == "idle" {
			pub, deliv = fmt.Sprintf("%s conn", humanCount(r.ConnRate)), fmt.Sprintf("%.0fB/conn", r.MemPerConn)
		}
		cpu := "-"
		if r.CPUPerMsgNs > 0 {
			cpu = fmt.Sprintf("%.0fns", r.CPUPerMsgNs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Label(), r.System, pub, deliv, r.MBps,
			lat[0], lat[1], lat[2], lat[3], cpu, loss, gap, fmtLoad(r.Load1))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rs {
		if r.Err != "" {
			fmt.Fprintf(w, "note: %s on %s: %s\n", r.Label(), r.System, r.Err)
		}
	}
	return nil
}

// WriteJSON writes rs as an indented JSON array.
func WriteJSON(w io.Writer, rs []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rs)
}

// Comparison pairs the runs of one scenario on two systems.
type Comparison struct {
	Label  string    `json:"label"`
	A, B   []Result  `json:"-"`
	System [2]string `json:"systems"`
	// Headline values: the median over the alternated runs of each system.
	ValueA float64 `json:"value_a"`
	ValueB float64 `json:"value_b"`
	// Spread of the headline over each side's runs: [min, max].
	RangeA [2]float64 `json:"range_a"`
	RangeB [2]float64 `json:"range_b"`
	Unit   string     `json:"unit"`
	// Ratio is ValueA / ValueB (so for a lower-is-better unit, < 1 means A
	// is better).
	Ratio        float64 `json:"ratio"`
	HigherBetter bool    `json:"higher_is_better"`
	// LostA and LostB sum Result.Lost over each side's runs (0 for a
	// scenario without deliveries); GapA and GapB the part of it the
	// system announced (Result.Dropped).
	LostA int64 `json:"lost_a"`
	LostB int64 `json:"lost_b"`
	GapA  int64 `json:"gap_a"`
	GapB  int64 `json:"gap_b"`
	// Load1 is the lowest and highest 1-minute load average seen over all
	// the runs of both sides.
	Load1 [2]float64 `json:"load1"`
}

// Compare builds the Comparison of runs a (system A) and b (system B) of one
// scenario, taking the median headline of each side.
func Compare(a, b []Result) Comparison {
	c := Comparison{A: a, B: b}
	if len(a) > 0 {
		c.Label, c.System[0] = a[0].Label(), a[0].System
		_, c.Unit, c.HigherBetter = a[0].Headline()
	}
	if len(b) > 0 {
		c.System[1] = b[0].System
	}
	c.ValueA, c.ValueB = medianHeadline(a), medianHeadline(b)
	c.Load1 = [2]float64{math.Inf(1), 0}
	for _, r := range a {
		c.LostA += r.Lost()
		c.GapA += r.Dropped
	}
	for _, r := range b {
		c.LostB += r.Lost()
		c.GapB += r.Dropped
	}
	for _, r := range append(append([]Result(nil), a...), b...) {
		c.Load1[0] = min(c.Load1[0], r.Load1[0], r.Load1[1])
		c.Load1[1] = max(c.Load1[1], r.Load1[0], r.Load1[1])
	}
	if math.IsInf(c.Load1[0], 1) {
		c.Load1[0] = 0
	}
	c.RangeA, c.RangeB = headlineRange(a), headlineRange(b)
	if c.ValueB != 0 {
		c.Ratio = c.ValueA / c.ValueB
	}
	return c
}

func headlineRange(rs []Result) [2]float64 {
	if len(rs) == 0 {
		return [2]float64{} // zero, not NaN: the value must encode as JSON
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rs {
		v, _, _ := r.Headline()
		lo, hi = min(lo, v), max(hi, v)
	}
	return [2]float64{lo, hi}
}

func medianHeadline(rs []Result) float64 {
	return medianOf(rs, func(r Result) float64 { v, _, _ := r.Headline(); return v })
}

// WriteComparison writes one line per comparison: label, both medians and
// the ratio A/B, plus, for latency, the ratio of every percentile.
func WriteComparison(w io.Writer, cs []Comparison) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(cs) == 0 {
		return nil
	}
	fmt.Fprintf(tw, "scenario\t%s\t%s\tratio %s/%s\tunit\t%s range\t%s range\t%s lost\t%s lost\tload1\t\n",
		cs[0].System[0], cs[0].System[1], cs[0].System[0], cs[0].System[1], cs[0].System[0], cs[0].System[1],
		cs[0].System[0], cs[0].System[1])
	for _, c := range cs {
		va, vb := fmtValue(c.ValueA, c.Unit), fmtValue(c.ValueB, c.Unit)
		note := ""
		if !c.HigherBetter {
			note = " (lower is better)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s%s\t%s\t%s\t%s\t%s\t%.2f..%.2f\t\n", c.Label, va, vb, c.Ratio, c.Unit, note,
			fmtRange(c.RangeA, c.Unit), fmtRange(c.RangeB, c.Unit), c.lostText(0), c.lostText(1), c.Load1[0], c.Load1[1])
	}
	return tw.Flush()
}

// lostText is side i's lost deliveries over its runs, with the announced
// part: "0", "1234 (gap 1000)", or "-" for a scenario without deliveries.
func (c Comparison) lostText(i int) string {
	rs, lost, gap := c.A, c.LostA, c.GapA
	if i == 1 {
		rs, lost, gap = c.B, c.LostB, c.GapB
	}
	if len(rs) == 0 || rs[0].Expected == 0 {
		return "-"
	}
	if gap > 0 {
		return fmt.Sprintf("%d (gap %d)", lost, gap)
	}
	return fmt.Sprint(lost)
}

func fmtRange(r [2]float64, unit string) string {
	return fmtValue(r[0], unit) + ".." + fmtValue(r[1], unit)
}

func fmtValue(v float64, unit string) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case strings.HasPrefix(unit, "p"):
		return fmtDur(int64(v))
	case strings.HasPrefix(unit, "B/"):
		return fmt.Sprintf("%.0f", v)
	}
	return humanCount(v)
}

// WriteMarkdown writes one Markdown table per comparison: the headline
// (median and range over the runs), latency percentiles (medians) where
// measured, server CPU per message and undelivered messages, for both
// systems, with the ratio A/B.
func WriteMarkdown(w io.Writer, cs []Comparison) error {
	for _, c := range cs {
		if len(c.A) == 0 || len(c.B) == 0 {
			continue
		}
		_, unit, _ := c.A[0].Headline()
		fmt.Fprintf(w, "### %s\n\n| metric | %s | %s | ratio %s/%s |\n|---|---:|---:|---:|\n",
			c.Label, c.System[0], c.System[1], c.System[0], c.System[1])
		row := func(name string, f func(Result) float64, format func(float64) string) {
			a, b := medianOf(c.A, f), medianOf(c.B, f)
			ratio := "-"
			if b != 0 {
				ratio = fmt.Sprintf("%.2f", a/b)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", name, format(a), format(b), ratio)
		}
		fmtU := func(v float64) string { return fmtValue(v, unit) }
		better := "higher is better"
		if !c.HigherBetter {
			better = "lower is better"
		}
		fmt.Fprintf(w, "| %s (median, %s) | %s | %s | %.2f |\n", unit, better, fmtU(c.ValueA), fmtU(c.ValueB), c.Ratio)
		fmt.Fprintf(w, "| range over %d / %d runs | %s | %s | |\n", len(c.A), len(c.B), fmtRange(c.RangeA, unit), fmtRange(c.RangeB, unit))
		if c.A[0].Latency != nil {
			for _, p := range []struct {
				name string
				f    func(*LatencySummary) int64
			}{
				{"p50", func(l *LatencySummary) int64 { return l.P50 }},
				{"p99", func(l *LatencySummary) int64 { return l.P99 }},
				{"p99.9", func(l *LatencySummary) int64 { return l.P999 }},
				{"max", func(l *LatencySummary) int64 { return l.Max }},
			} {
				if p.name == unit {
					continue // already the headline row
				}
				row(p.name, func(r Result) float64 {
					if r.Latency == nil {
						return 0
					}
					return float64(p.f(r.Latency))
				}, func(v float64) string { return fmtDur(int64(v)) })
			}
		}
		row("server CPU per message", func(r Result) float64 { return r.CPUPerMsgNs },
			func(v float64) string { return fmt.Sprintf("%.0f ns", v) })
		if c.A[0].Expected > 0 {
			fmt.Fprintf(w, "| lost deliveries, all runs (of which GAP-announced) | %d (%d) | %d (%d) | |\n", c.LostA, c.GapA, c.LostB, c.GapB)
		}
		fmt.Fprintf(w, "| load average (1 min), over the runs | %.2f..%.2f | | |\n", c.Load1[0], c.Load1[1])
		fmt.Fprintln(w)
	}
	return nil
}

// medianOf is the median of f over rs (0 for none).
func medianOf(rs []Result, f func(Result) float64) float64 {
	vs := make([]float64, 0, len(rs))
	for _, r := range rs {
		vs = append(vs, f(r))
	}
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	if len(vs)%2 == 1 {
		return vs[len(vs)/2]
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
}
