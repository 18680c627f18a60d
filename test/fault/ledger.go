// Package fault is Sluice's fault suite: a cluster of `sluice serve`
// processes, one per Linux network namespace on a bridge, under acked
// publishing and live subscribing through the Go SDK, while a node is
// paused (SIGSTOP), cut off (its bridge port down), cut off in one
// direction (nftables), or killed during a partition.
//
// The cases need root and iproute2 and are built only with the build tag
// faultsuite (.ci/run runs them as a step of their own):
//
//	go test -tags faultsuite -count=1 -v ./test/fault/
//
// Without root or the ip command they skip, saying so. The accounting of
// what the subscribers saw against what was acknowledged (this file) is
// pure and has table tests that run everywhere.
//
// The nemesis (nemesisrun_test.go, build tags faultsuite and nemesis) is
// the randomized counterpart of the fixed cases on the same topology: a
// schedule of faults drawn from a seed (schedule.go), histories checked by
// porcupine against a per-channel log model (linear.go) and counted
// (tally.go); those parts are pure and tested everywhere too.
package fault

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MsgID names one publish: the publisher and its sequence number. The
// payload of every publish carries it, with the channel, so a delivery
// can be checked against the acknowledgement for its position.
type MsgID struct {
	Pub, Seq int
}

// Payload returns the payload of publish id to channel: "ch|pub|seq|"
// followed by padding up to size bytes.
func Payload(channel string, id MsgID, size int) []byte {
	b := []byte(fmt.Sprintf("%s|%d|%d|", channel, id.Pub, id.Seq))
	for len(b) < size {
		b = append(b, 'x')
	}
	return b
}

// ParsePayload is the inverse of Payload; false for a payload that no
// publisher of the suite sent.
func ParsePayload(p []byte) (channel string, id MsgID, ok bool) {
	parts := strings.SplitN(string(p), "|", 4)
	if len(parts) != 4 || strings.Trim(parts[3], "x") != "" {
		return "", MsgID{}, false
	}
	var err1, err2 error
	id.Pub, err1 = strconv.Atoi(parts[1])
	id.Seq, err2 = strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil {
		return "", MsgID{}, false
	}
	return parts[0], id, true
}

// Outcome is what a publisher learned about one publish.
type Outcome uint8

const (
	// Pending: no answer yet (counted as unknown).
	Pending Outcome = iota
	// Acked: acknowledged at a position.
	Acked
	// Refused: refused definitively (an ERROR such as UNAVAILABLE, or not
	// sent at all): the message must not have been stored.
	Refused
	// Unknown: the SDK reported ErrUnknownOutcome.
	Unknown
)

// Publish is one publish and its outcome.
type Publish struct {
	Channel string
	ID      MsgID
	Outcome Outcome
	Pos     uint64    // Acked
	Sent    time.Time // when it was handed to the SDK
	Done    time.Time // when the outcome arrived
	Err     string    // Refused, Unknown
}

// Kind of a subscriber event.
type Kind uint8

// Event kinds, as the SDK reports them.
const (
	Message Kind = iota + 1
	Gap
	Epoch
)

// Event is one event a subscriber received.
type Event struct {
	Kind     Kind
	Pos      uint64 // Message; Epoch: the new first position
	Payload  []byte // Message
	From, To uint64 // Gap, inclusive
	Reason   string // Gap: "lost", "expired" or "slow"
	At       time.Time
}

// Sub is what one subscription to one channel received, from position
// From on (every publish acked at From or later is expected).
type Sub struct {
	Name    string // for reports: the subscriber and the channel
	Channel string
	From    uint64
	Events  []Event
}

// Result counts a case. A case passes when Silent, Duplicates,
// OutOfOrder, Mismatch, DoubleAcks, RefusedDelivered and Late are all 0.
type Result struct {
	Acked     int // acknowledged publishes (each expected by every subscriber of its channel)
	Refused   int // publishes refused definitively
	Unknown   int // publishes whose outcome is unknown
	Expected  int // acked publishes x subscribers of their channel
	Delivered int // of Expected: delivered with the acked payload
	Announced int // of Expected: covered by a GAP instead
	Silent    int // of Expected: neither (by the end of the case)
	Late      int // of Expected: delivered or announced, but later than the bound after the ack

	Duplicates       int // a message (or a position) delivered twice to one subscription
	OutOfOrder       int // a delivery or gap below one already seen
	Mismatch         int // a delivery whose payload is not the publish acked at its position
	DoubleAcks       int // two publishes acknowledged with one position of a channel
	RefusedDelivered int // deliveries of publishes that were refused definitively
	UnknownDelivered int // deliveries of publishes of unknown outcome (allowed, once)
	Epochs           int // epoch changes seen by subscribers

	// Stopped: subscriptions whose channel's last acknowledged positions
	// are silent: they stopped with no gap and never continued (each also
	// counts in Silent), and their names.
	Stopped     int
	StoppedSubs []string

	MaxLatency time.Duration // ack -> delivery or gap, over Expected
	P99Latency time.Duration
	Examples   []string  // the first few problems, for the report
	Problems   []Problem // the first maxProblems problems and gaps over acknowledged positions, for reports that place them in time
}

// Problem is one finding of Account: a kind, where, and the
// acknowledgement it is about.
type Problem struct {
	Kind    string // silent, stopped, late, announced, mismatch, duplicate, out-of-order, double-ack, refused-delivered
	Sub     string // the subscription's name ("" for a double ack)
	Channel string
	Pos     uint64
	Acked   time.Time // when Pos was acknowledged (zero if it was not)
	At      time.Time // when the subscriber got what is wrong (zero for silence)
	Text    string
}

// OK reports whether the case passes.
func (r Result) OK() bool {
	return r.Silent == 0 && r.Duplicates == 0 && r.OutOfOrder == 0 && r.Mismatch == 0 &&
		r.DoubleAcks == 0 && r.RefusedDelivered == 0 && r.Late == 0
}

// String is the one-line report of a case.
func (r Result) String() string {
	return fmt.Sprintf("acked %d (refused %d, unknown %d); expected %d: delivered %d, announced lost %d, silent %d, late %d; "+
		"duplicates %d, out of order %d, payload mismatch %d, double acks %d, refused yet delivered %d, unknown delivered %d, epoch changes %d; "+
		"latency p99 %v max %v",
		r.Acked, r.Refused, r.Unknown, r.Expected, r.Delivered, r.Announced, r.Silent, r.Late,
		r.Duplicates, r.OutOfOrder, r.Mismatch, r.DoubleAcks, r.RefusedDelivered, r.UnknownDelivered, r.Epochs,
		r.P99Latency.Round(time.Millisecond), r.MaxLatency.Round(time.Millisecond))
}

const (
	maxExamples = 12
	maxProblems = 200
)

// note records problem p (its Text from format and args) among the
// examples and the problems.
func (r *Result) note(p Problem, format string, args ...any) {
	p.Text = fmt.Sprintf(format, args...)
	if len(r.Examples) < maxExamples && p.Kind != "announced" {
		r.Examples = append(r.Examples, p.Text)
	}
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, p)
	}
}

// Account checks what every subscription received against what was
// acknowledged. bound is the longest time allowed from an ack to the
// delivery (or GAP) of its message at each subscriber.
func Account(pubs []Publish, subs []Sub, bound time.Duration) Result {
	return AccountWithin(pubs, subs, func(acked time.Time) time.Time { return acked.Add(bound) })
}

// AccountWithin is Account with a deadline for each acknowledgement:
// deadline(acked) is the latest time its message (or a GAP covering it)
// may reach a subscriber.
func AccountWithin(pubs []Publish, subs []Sub, deadline func(acked time.Time) time.Time) Result {
	a := accounting{acked: map[posKey]*Publish{}, byID: map[MsgID]*Publish{}, perCh: map[string][]*Publish{}, deadline: deadline}
	r := &a.r
	for i := range pubs {
		p := &pubs[i]
		a.byID[p.ID] = p
		switch p.Outcome {
		case Acked:
			k := posKey{p.Channel, p.Pos}
			if q := a.acked[k]; q != nil {
				r.DoubleAcks++
				r.note(Problem{Kind: "double-ack", Channel: p.Channel, Pos: p.Pos, Acked: p.Done},
					"%s position %d acked for %v and %v", p.Channel, p.Pos, q.ID, p.ID)
				continue
			}
			a.acked[k] = p
			a.perCh[p.Channel] = append(a.perCh[p.Channel], p)
			r.Acked++
		case Refused:
			r.Refused++
		default:
			r.Unknown++
		}
	}
	for _, ps := range a.perCh {
		sort.Slice(ps, func(i, j int) bool { return ps[i].Pos < ps[j].Pos })
	}
	for si := range subs {
		a.received(&subs[si])
		a.expected(&subs[si])
	}
	if len(a.lat) > 0 {
		sort.Slice(a.lat, func(i, j int) bool { return a.lat[i] < a.lat[j] })
		r.MaxLatency = a.lat[len(a.lat)-1]
		r.P99Latency = a.lat[len(a.lat)*99/100]
	}
	return a.r
}

type posKey struct {
	ch  string
	pos uint64
}

// accounting is AccountWithin's state: the acknowledgements, and what the
// subscription being accounted received (received fills it, expected
// reads it).
type accounting struct {
	r        Result
	acked    map[posKey]*Publish
	byID     map[MsgID]*Publish
	perCh    map[string][]*Publish
	deadline func(time.Time) time.Time
	lat      []time.Duration

	covered map[uint64]time.Time // acked position -> when delivered
	gaps    []Event
	last    uint64 // highest position delivered or gap end seen
}

// problem returns a Problem of kind at event ev of s.
func (a *accounting) problem(kind string, s *Sub, ev Event) Problem {
	var when time.Time
	if p := a.acked[posKey{s.Channel, ev.Pos}]; p != nil {
		when = p.Done
	}
	return Problem{Kind: kind, Sub: s.Name, Channel: s.Channel, Pos: max(ev.Pos, ev.From), Acked: when, At: ev.At}
}

// received accounts the events of s: duplicates, order, payloads.
func (a *accounting) received(s *Sub) {
	r := &a.r
	a.covered, a.gaps, a.last = map[uint64]time.Time{}, nil, 0
	seenID := make(map[MsgID]bool)
	seenPos := make(map[uint64]bool)
	for _, ev := range s.Events {
		switch ev.Kind {
		case Epoch:
			r.Epochs++
		case Gap:
			if a.last != 0 && ev.From <= a.last {
				r.OutOfOrder++
				r.note(a.problem("out-of-order", s, ev), "%s: gap %d-%d after position %d", s.Name, ev.From, ev.To, a.last)
			}
			a.gaps = append(a.gaps, ev)
			a.last = max(a.last, ev.To)
		case Message:
			ch, id, ok := ParsePayload(ev.Payload)
			switch {
			case seenPos[ev.Pos] || (ok && seenID[id]):
				r.Duplicates++
				r.note(a.problem("duplicate", s, ev), "%s: position %d (%q) delivered again", s.Name, ev.Pos, short(ev.Payload))
			case a.last != 0 && ev.Pos <= a.last:
				r.OutOfOrder++
				r.note(a.problem("out-of-order", s, ev), "%s: position %d after %d", s.Name, ev.Pos, a.last)
			}
			seenPos[ev.Pos] = true
			if ok {
				seenID[id] = true
			}
			a.last = max(a.last, ev.Pos)
			a.payload(s, ev, ch, id, ok)
		}
	}
	sort.Slice(a.gaps, func(i, j int) bool { return a.gaps[i].From < a.gaps[j].From })
}

// payload checks the message ev of s (ch and id parsed from it, ok if it
// parsed) against the acknowledgement of its position.
func (a *accounting) payload(s *Sub, ev Event, ch string, id MsgID, ok bool) {
	r := &a.r
	acked := a.acked[posKey{s.Channel, ev.Pos}]
	switch {
	case acked != nil && ok && ch == s.Channel && acked.ID == id:
		if _, again := a.covered[ev.Pos]; !again {
			a.covered[ev.Pos] = ev.At
		}
	case acked != nil:
		r.Mismatch++
		r.note(a.problem("mismatch", s, ev), "%s: position %d holds %q, acked for %v", s.Name, ev.Pos, short(ev.Payload), acked.ID)
	case !ok || ch != s.Channel:
		r.Mismatch++
		r.note(a.problem("mismatch", s, ev), "%s: position %d holds %q, not a publish to this channel", s.Name, ev.Pos, short(ev.Payload))
	default:
		p := a.byID[id]
		switch {
		case p == nil:
			r.Mismatch++
			r.note(a.problem("mismatch", s, ev), "%s: position %d holds %v, never published", s.Name, ev.Pos, id)
		case p.Outcome == Acked:
			r.Mismatch++
			r.note(a.problem("mismatch", s, ev), "%s: position %d holds %v, which was acked at position %d", s.Name, ev.Pos, id, p.Pos)
		case p.Outcome == Refused:
			r.RefusedDelivered++
			r.note(a.problem("refused-delivered", s, ev), "%s: position %d holds %v, whose publish was refused (%s)", s.Name, ev.Pos, id, p.Err)
		default:
			r.UnknownDelivered++
		}
	}
}

// expected accounts every acknowledgement s should have got against what
// received found: delivered, announced by a GAP (which one), silent,
// late, and whether s stopped.
func (a *accounting) expected(s *Sub) {
	r := &a.r
	var silent, late []*Publish
	var worst time.Duration
	hits := make([]int, len(a.gaps))          // acked positions each gap covers first
	firstHit := make([]*Publish, len(a.gaps)) // the lowest of them
	var lastAcked *Publish
	for _, p := range a.perCh[s.Channel] {
		if p.Pos < s.From {
			continue
		}
		r.Expected++
		if lastAcked == nil || p.Pos > lastAcked.Pos {
			lastAcked = p
		}
		at, ok := a.covered[p.Pos]
		if ok {
			r.Delivered++
		} else {
			g := -1
			i := sort.Search(len(a.gaps), func(i int) bool { return a.gaps[i].From > p.Pos })
			for j := 0; j < i; j++ { // gaps starting at or before p.Pos
				if a.gaps[j].To >= p.Pos && (g < 0 || a.gaps[j].At.Before(at)) {
					at, g = a.gaps[j].At, j
				}
			}
			if g < 0 {
				r.Silent++
				silent = append(silent, p)
				continue
			}
			r.Announced++
			if hits[g]++; firstHit[g] == nil || p.Pos < firstHit[g].Pos {
				firstHit[g] = p
			}
		}
		a.lat = append(a.lat, max(at.Sub(p.Done), 0))
		if at.After(a.deadline(p.Done)) {
			r.Late++
			late = append(late, p)
			worst = max(worst, at.Sub(p.Done))
		}
	}
	for j, g := range a.gaps {
		if hits[j] > 0 {
			p := firstHit[j]
			r.note(Problem{Kind: "announced", Sub: s.Name, Channel: s.Channel, Pos: p.Pos, Acked: p.Done, At: g.At},
				"%s: GAP %s %d..%d covers %d acknowledged positions, the first %d", s.Name, g.Reason, g.From, g.To, hits[j], p.Pos)
		}
	}
	if len(late) > 0 {
		p := late[0]
		r.note(Problem{Kind: "late", Sub: s.Name, Channel: s.Channel, Pos: p.Pos, Acked: p.Done},
			"%s: %d acked positions in %d..%d covered after their deadline (at most %v after the ack)",
			s.Name, len(late), p.Pos, late[len(late)-1].Pos, worst.Round(time.Millisecond))
	}
	if len(silent) == 0 {
		return
	}
	p := silent[0]
	r.note(Problem{Kind: "silent", Sub: s.Name, Channel: s.Channel, Pos: p.Pos, Acked: p.Done},
		"%s: %d acked positions in %d..%d neither delivered nor announced; it received %d events, the last at position %d",
		s.Name, len(silent), p.Pos, silent[len(silent)-1].Pos, len(s.Events), a.last)
	if silent[len(silent)-1] == lastAcked && a.last < lastAcked.Pos {
		k := 0
		for k < len(silent) && silent[len(silent)-1-k].Pos > a.last {
			k++
		}
		q := silent[len(silent)-k]
		r.Stopped++
		r.StoppedSubs = append(r.StoppedSubs, s.Name)
		r.note(Problem{Kind: "stopped", Sub: s.Name, Channel: s.Channel, Pos: q.Pos, Acked: q.Done},
			"%s: stopped after position %d with no gap; the %d acknowledged positions %d..%d after it never came",
			s.Name, a.last, k, q.Pos, lastAcked.Pos)
	}
}

func short(p []byte) string {
	s := strings.TrimRight(string(p), "x")
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}
