package fault

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Tally is the nemesis's count of a run, as the table counts the
// independent runs, with the verdict for its replica count.
type Tally struct {
	Replicas int
	Live     Result // the live subscribers, each acknowledgement within its Deadline
	Replay   Result // the replays from earliest on every node after the convergence wait (no time bound)
	// AnnouncedMsgs: acknowledged messages that a GAP announced lost to at
	// least one live subscriber (Live.Announced counts each subscriber).
	AnnouncedMsgs int
	// FalseGaps: of those, the ones a replay delivered: announced lost
	// while a node still served them (never allowed, N = 1 included: a
	// GAP lost must be exact).
	FalseGaps int
	// By node: live subscriptions and replays that stopped with no gap
	// (channels), and acknowledged messages a replay on the node missed
	// (silent or announced).
	StoppedOn       map[string]int
	ReplayStoppedOn map[string]int
	ReplayMissingOn map[string]int
	Lin             LinResult
}

// NewTally accounts a run: pubs are every publish with its outcome, live
// the live subscriptions, replay the replays (names "role@node/channel").
func NewTally(replicas int, pubs []Publish, live, replay []Sub, deadline func(time.Time) time.Time, lin LinResult) Tally {
	t := Tally{Replicas: replicas, Lin: lin, StoppedOn: map[string]int{}, ReplayStoppedOn: map[string]int{}, ReplayMissingOn: map[string]int{}}
	t.Live = AccountWithin(pubs, live, deadline)
	t.Replay = Account(pubs, replay, time.Hour) // the replays read late on purpose
	byNode := map[string][]Sub{}
	for _, s := range replay {
		byNode[SubNode(s.Name)] = append(byNode[SubNode(s.Name)], s)
	}
	for node, subs := range byNode {
		r := Account(pubs, subs, time.Hour)
		if n := r.Silent + r.Announced; n > 0 {
			t.ReplayMissingOn[node] = n
		}
	}
	for _, name := range t.Live.StoppedSubs {
		t.StoppedOn[SubNode(name)]++
	}
	for _, name := range t.Replay.StoppedSubs {
		t.ReplayStoppedOn[SubNode(name)]++
	}
	ack := map[posKey]MsgID{}
	ackedIn := map[string][]uint64{} // channel -> its acknowledged positions, sorted
	for _, p := range pubs {
		if p.Outcome == Acked {
			ack[posKey{p.Channel, p.Pos}] = p.ID
			ackedIn[p.Channel] = append(ackedIn[p.Channel], p.Pos)
		}
	}
	for _, ps := range ackedIn {
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	}
	served := map[posKey]bool{} // acknowledged positions a replay delivered with their message
	for _, s := range replay {
		for _, ev := range s.Events {
			if _, id, ok := ParsePayload(ev.Payload); ev.Kind == Message && ok && ack[posKey{s.Channel, ev.Pos}] == id {
				served[posKey{s.Channel, ev.Pos}] = true
			}
		}
	}
	announced := map[posKey]bool{}
	for _, s := range live {
		got := map[uint64]bool{}
		for _, ev := range s.Events {
			if ev.Kind == Message {
				got[ev.Pos] = true
			}
		}
		ps := ackedIn[s.Channel]
		for _, ev := range s.Events {
			if ev.Kind != Gap {
				continue
			}
			for i := sort.Search(len(ps), func(i int) bool { return ps[i] >= ev.From }); i < len(ps) && ps[i] <= ev.To; i++ {
				if pos := ps[i]; !got[pos] && pos >= s.From {
					announced[posKey{s.Channel, pos}] = true
				}
			}
		}
	}
	t.AnnouncedMsgs = len(announced)
	for k := range announced {
		if served[k] {
			t.FalseGaps++
		}
	}
	return t
}

// Failures lists what breaks the promise, one line each; none when the
// run passes. Late deliveries, losses, gaps over acknowledged messages and
// epoch changes (for N >= 2), silences, duplicates, payload mismatches, positions
// acknowledged twice, deliveries of refused publishes, a history
// porcupine (or the exact check) finds not linearizable. An Unknown
// verdict (out of time) is reported by String, not a failure.
func (t Tally) Failures() []string {
	var out []string
	add := func(n int, what string) {
		if n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(t.Live.DoubleAcks, "positions acknowledged for two messages")
	add(t.Live.Mismatch+t.Replay.Mismatch, "payload mismatches (live, replay)")
	add(t.Live.Duplicates+t.Replay.Duplicates, "duplicates (live, replay)")
	add(t.Live.OutOfOrder+t.Replay.OutOfOrder, "deliveries out of order (live, replay)")
	add(t.Live.RefusedDelivered+t.Replay.RefusedDelivered, "deliveries of refused publishes (live, replay)")
	add(t.Live.Silent, "acknowledged deliveries missing in live subscribers (silent)")
	add(t.Live.Late, "acknowledged deliveries (or gaps) to live subscribers after their deadline")
	add(t.Replay.Silent, "acknowledged messages missing in replays (silent)")
	add(t.FalseGaps, "acknowledged messages announced lost to live subscribers that a replay delivered")
	if t.Replicas >= 2 {
		add(t.AnnouncedMsgs, fmt.Sprintf("acknowledged messages announced GAP lost to live subscribers (N = %d)", t.Replicas))
		add(t.Replay.Announced, fmt.Sprintf("acknowledged messages announced lost in replays (N = %d)", t.Replicas))
		add(t.Live.Epochs+t.Replay.Epochs, fmt.Sprintf("epoch changes: channels recreated under continuous publishing (N = %d)", t.Replicas))
	}
	add(len(t.Lin.Illegal), "channels not linearizable (porcupine)")
	if n := len(t.Lin.Why); n > len(t.Lin.Illegal) {
		add(n, "channels not linearizable (the exact check)")
	}
	return out
}

// String is the run's table row and its lines by node.
func (t Tally) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "acked %d (refused %d, unknown %d)\n", t.Live.Acked, t.Live.Refused, t.Live.Unknown)
	fmt.Fprintf(&b, "live: announced GAP lost over acknowledged messages: %d messages (%d deliveries); false (a replay had them): %d\n",
		t.AnnouncedMsgs, t.Live.Announced, t.FalseGaps)
	fmt.Fprintf(&b, "live: missing (silent) %d, late %d; subscriptions stopped with no gap: %d %s; latency p99 %v max %v\n",
		t.Live.Silent, t.Live.Late, t.Live.Stopped, byNode(t.StoppedOn, "channels"),
		t.Live.P99Latency.Round(time.Millisecond), t.Live.MaxLatency.Round(time.Millisecond))
	fmt.Fprintf(&b, "replay from earliest: missing %d (silent %d, announced lost %d) %s; stopped with no gap: %d %s\n",
		t.Replay.Silent+t.Replay.Announced, t.Replay.Silent, t.Replay.Announced, byNode(t.ReplayMissingOn, "acked"),
		t.Replay.Stopped, byNode(t.ReplayStoppedOn, "channels"))
	fmt.Fprintf(&b, "positions acknowledged twice %d; payload mismatches %d (replay %d); duplicates %d (replay %d); out of order %d; "+
		"refused yet delivered %d; unknown outcome delivered %d; epoch changes %d\n",
		t.Live.DoubleAcks, t.Live.Mismatch, t.Replay.Mismatch, t.Live.Duplicates, t.Replay.Duplicates,
		t.Live.OutOfOrder+t.Replay.OutOfOrder, t.Live.RefusedDelivered+t.Replay.RefusedDelivered,
		t.Live.UnknownDelivered, t.Live.Epochs+t.Replay.Epochs)
	b.WriteString(t.Lin.String())
	return b.String()
}

// byNode prints counts by node: "(a: 3 channels, c: 10 channels)".
func byNode(m map[string]int, unit string) string {
	if len(m) == 0 {
		return ""
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d %s", k, m[k], unit))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// Details places the first problems of the run in time (at most n lines):
// first why each channel that is not linearizable is not; then which
// channel, position, subscriber (node), when it was acknowledged and
// received, relative to which fault.
func (t Tally) Details(ws []Window, start time.Time, n int) []string {
	var out []string
	chans := make([]string, 0, len(t.Lin.Why))
	for ch := range t.Lin.Why {
		chans = append(chans, ch)
	}
	sort.Strings(chans)
	for _, ch := range chans {
		out = append(out, fmt.Sprintf("not linearizable: %s: %s (times from the run's start)", ch, t.Lin.Why[ch]))
	}
	for _, set := range []struct {
		name string
		r    Result
	}{{"live", t.Live}, {"replay", t.Replay}} {
		for _, p := range set.r.Problems {
			switch {
			case p.Kind == "announced" && t.Replicas < 2 && set.name == "live":
				continue // allowed for N = 1 (FalseGaps counts the wrong ones)
			case p.Kind == "double-ack" && set.name == "replay":
				continue // the same acknowledgements as live's
			}
			line := fmt.Sprintf("%s %s: %s; acknowledged %s", set.name, p.Kind, p.Text, Context(ws, p.Acked, start))
			if !p.At.IsZero() {
				line += fmt.Sprintf("; received at +%.1fs", p.At.Sub(start).Seconds())
			}
			out = append(out, line)
		}
	}
	if len(out) > n {
		out = append(out[:n], fmt.Sprintf("(%d more)", len(out)-n))
	}
	return out
}
