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
package fault

import (
	"fmt"
	"sort"
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
	if _, err := fmt.Sscanf(parts[1]+" "+parts[2], "%d %d", &id.Pub, &id.Seq); err != nil {
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

	MaxLatency time.Duration // ack -> delivery or gap, over Expected
	P99Latency time.Duration
	Examples   []string // the first few problems, for the report
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

const maxExamples = 12

func (r *Result) note(format string, args ...any) {
	if len(r.Examples) < maxExamples {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

// Account checks what every subscription received against what was
// acknowledged. bound is the longest time allowed from an ack to the
// delivery (or GAP) of its message at each subscriber.
func Account(pubs []Publish, subs []Sub, bound time.Duration) Result {
	var r Result
	type key struct {
		ch  string
		pos uint64
	}
	acked := make(map[key]*Publish)
	byID := make(map[MsgID]*Publish)
	perCh := make(map[string][]*Publish)
	for i := range pubs {
		p := &pubs[i]
		byID[p.ID] = p
		switch p.Outcome {
		case Acked:
			k := key{p.Channel, p.Pos}
			if q := acked[k]; q != nil {
				r.DoubleAcks++
				r.note("%s position %d acked for %v and %v", p.Channel, p.Pos, q.ID, p.ID)
				continue
			}
			acked[k] = p
			perCh[p.Channel] = append(perCh[p.Channel], p)
			r.Acked++
		case Refused:
			r.Refused++
		default:
			r.Unknown++
		}
	}
	var lat []time.Duration
	for si := range subs {
		s := &subs[si]
		covered := make(map[uint64]time.Time) // acked position -> when delivered
		seenID := make(map[MsgID]bool)
		seenPos := make(map[uint64]bool)
		var gaps []Event
		var last uint64 // highest position delivered or gap end seen
		for _, ev := range s.Events {
			switch ev.Kind {
			case Epoch:
				r.Epochs++
			case Gap:
				if last != 0 && ev.From <= last {
					r.OutOfOrder++
					r.note("%s: gap %d-%d after position %d", s.Name, ev.From, ev.To, last)
				}
				gaps = append(gaps, ev)
				last = max(last, ev.To)
			case Message:
				ch, id, ok := ParsePayload(ev.Payload)
				dup := seenPos[ev.Pos] || (ok && seenID[id])
				switch {
				case dup:
					r.Duplicates++
					r.note("%s: position %d (%q) delivered again", s.Name, ev.Pos, short(ev.Payload))
				case last != 0 && ev.Pos <= last:
					r.OutOfOrder++
					r.note("%s: position %d after %d", s.Name, ev.Pos, last)
				}
				seenPos[ev.Pos] = true
				if ok {
					seenID[id] = true
				}
				last = max(last, ev.Pos)
				a := acked[key{s.Channel, ev.Pos}]
				switch {
				case a != nil && ok && ch == s.Channel && a.ID == id:
					if _, again := covered[ev.Pos]; !again {
						covered[ev.Pos] = ev.At
					}
				case a != nil:
					r.Mismatch++
					r.note("%s: position %d holds %q, acked for %v", s.Name, ev.Pos, short(ev.Payload), a.ID)
				case !ok || ch != s.Channel:
					r.Mismatch++
					r.note("%s: position %d holds %q, not a publish to this channel", s.Name, ev.Pos, short(ev.Payload))
				default:
					p := byID[id]
					switch {
					case p == nil:
						r.Mismatch++
						r.note("%s: position %d holds %v, never published", s.Name, ev.Pos, id)
					case p.Outcome == Acked:
						r.Mismatch++
						r.note("%s: position %d holds %v, which was acked at position %d", s.Name, ev.Pos, id, p.Pos)
					case p.Outcome == Refused:
						r.RefusedDelivered++
						r.note("%s: position %d holds %v, whose publish was refused (%s)", s.Name, ev.Pos, id, p.Err)
					default:
						r.UnknownDelivered++
					}
				}
			}
		}
		sort.Slice(gaps, func(i, j int) bool { return gaps[i].From < gaps[j].From })
		silent, firstSilent, lastSilent := 0, uint64(0), uint64(0)
		late, firstLate, lastLate, worst := 0, uint64(0), uint64(0), time.Duration(0)
		for _, p := range perCh[s.Channel] {
			if p.Pos < s.From {
				continue
			}
			r.Expected++
			at, ok := covered[p.Pos]
			if ok {
				r.Delivered++
			} else {
				i := sort.Search(len(gaps), func(i int) bool { return gaps[i].From > p.Pos })
				for j := 0; j < i; j++ { // gaps starting at or before p.Pos
					if gaps[j].To >= p.Pos && (!ok || gaps[j].At.Before(at)) {
						at, ok = gaps[j].At, true
					}
				}
				if !ok {
					r.Silent++
					if silent == 0 {
						firstSilent = p.Pos
					}
					silent++
					lastSilent = p.Pos
					continue
				}
				r.Announced++
			}
			d := max(at.Sub(p.Done), 0)
			lat = append(lat, d)
			if d > bound {
				r.Late++
				if late == 0 {
					firstLate = p.Pos
				}
				late++
				lastLate, worst = p.Pos, max(worst, d)
			}
		}
		if late > 0 {
			r.note("%s: %d acked positions in %d..%d covered later than %v after their ack (at most %v)",
				s.Name, late, firstLate, lastLate, bound, worst.Round(time.Millisecond))
		}
		if silent > 0 {
			r.note("%s: %d acked positions in %d..%d neither delivered nor announced; it received %d events, the last at position %d",
				s.Name, silent, firstSilent, lastSilent, len(s.Events), last)
		}
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		r.MaxLatency = lat[len(lat)-1]
		r.P99Latency = lat[len(lat)*99/100]
	}
	return r
}

func short(p []byte) string {
	s := strings.TrimRight(string(p), "x")
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}
