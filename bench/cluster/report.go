package cluster

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteCompare writes rep as text tables: every run, then the medians per
// setup and the ratios of each cluster setup to the single node.
func WriteCompare(w io.Writer, rep *CompareReport) {
	c := rep.Config
	fmt.Fprintf(w, "compare: %d runs, %d B payload, pubsub %d messages, latency %.0f msg/s for %v, %d loop(s) per node; cluster nodes %v (publisher on %s, cross subscriber on %s)\n\n",
		c.Runs, c.Size, c.Count, c.Rate, c.Duration, c.Loops, rep.Nodes, rep.Nodes[0], rep.Nodes[1])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "setup\tscenario\tresult\tplacement (streamlets/messages per host)\terror")
	for _, runs := range [][]Run{rep.Throughput, rep.Latency} {
		for _, r := range runs {
			place := "-"
			if r.Place != nil {
				place = r.Place.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Setup, r.Result.Scenario, resultCell(r), place, r.Err)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	sums := rep.Summaries()
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "setup (median)\truns ok\tpubsub msg/s\tCPU ns/msg\tp50\tp99\tp99.9\tmax\tthroughput ratio\tp50 ratio\tp99 ratio")
	base := sums[0]
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%v\t%v\t%v\t%v\t%s\t%s\t%s\n", s.Setup, s.Runs, s.DeliverRate, s.CPUPerMsg,
			round(s.P50), round(s.P99), round(s.P999), round(s.Max),
			ratio(s.DeliverRate, base.DeliverRate), ratio(float64(s.P50), float64(base.P50)), ratio(float64(s.P99), float64(base.P99)))
	}
	tw.Flush()
}

func resultCell(r Run) string {
	res := r.Result
	if res.Scenario == "latency" {
		if res.Latency == nil {
			return "-"
		}
		return fmt.Sprintf("p50 %v p99 %v p99.9 %v max %v (%d/%d)", round(time.Duration(res.Latency.P50)),
			round(time.Duration(res.Latency.P99)), round(time.Duration(res.Latency.P999)), round(time.Duration(res.Latency.Max)),
			res.Delivered, res.Expected)
	}
	return fmt.Sprintf("%.0f msg/s (%d/%d), %.0f ns CPU/msg", res.DeliverRate, res.Delivered, res.Expected, res.CPUPerMsgNs)
}

func ratio(x, base float64) string {
	if base == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x/base)
}

// round keeps three significant digits of a duration for tables.
func round(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d >= 100*time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d.Round(100 * time.Nanosecond)
}

// WriteSpread writes rep as a per-node table with the imbalance (max/mean)
// of each column.
func WriteSpread(w io.Writer, rep *SpreadReport) {
	c := rep.Config
	fmt.Fprintf(w, "spread: 3 nodes, hot channel %.0f msg/s, %d cold channels at %.0f msg/s, %d B, %v; limit-life %v, limit-msgs %d, TTL %v; %d samples every %v\n",
		c.HotRate, c.Cold, c.ColdRate, c.Size, c.Duration, c.LimitLife, c.LimitMsgs, c.TTL, rep.Samples, c.Sample)
	fmt.Fprintf(w, "samples with a peer seen as not alive: %d of %d\n", rep.DegradedSamples, rep.Samples)
	fmt.Fprintf(w, "published (acknowledged/scheduled): hot %d/%d, cold %d/%d; refused %d, unanswered %d%s\n",
		rep.HotPublished, rep.HotScheduled, rep.ColdPublished, rep.ColdScheduled, rep.PubErrors, rep.Unacked, firstText(rep.PubErr))
	fmt.Fprintf(w, "delivered: hot %d/%d, cold %d/%d, reported dropped %d; hot publisher max lag %v; hot channel managed by %s\n\n",
		rep.HotDelivered, rep.HotPublished, rep.ColdDelivered, rep.ColdPublished, rep.Dropped, round(rep.MaxSendLag), rep.HotManager)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "node\tstreamlets max\tstreamlets mean\tchannels managed\tchannels reported max\tappended (est.)\tpeak msg/s in\thot streamlets\thot msgs\tMessagesIn (metrics)")
	var cols [9][]float64
	for _, n := range rep.Nodes {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%d\t%d\t%.0f\t%.0f\t%d\t%d\t%d\n", n.Name, n.StreamletsMax, n.StreamletsMean, n.Managed,
			n.ChannelsMax, n.Appended, n.MsgsInMax, n.HotStreamlets, n.HotMsgs, n.MsgsIn)
		for i, v := range []float64{float64(n.StreamletsMax), n.StreamletsMean, float64(n.Managed), float64(n.ChannelsMax), n.Appended,
			n.MsgsInMax, float64(n.HotStreamlets), float64(n.HotMsgs), float64(n.MsgsIn)} {
			cols[i] = append(cols[i], v)
		}
	}
	fmt.Fprint(tw, "max/mean")
	for _, col := range cols {
		fmt.Fprintf(tw, "\t%s", imbalance(col))
	}
	fmt.Fprintln(tw)
	tw.Flush()
}

// imbalance is max/mean of xs, "-" when the mean is 0.
func imbalance(xs []float64) string {
	var sum, mx float64
	for _, x := range xs {
		sum += x
		mx = max(mx, x)
	}
	if sum == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", mx/(sum/float64(len(xs))))
}

func firstText(s string) string {
	if s == "" {
		return ""
	}
	return " (first: " + s + ")"
}
