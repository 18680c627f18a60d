package fault

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// The linearizability check of the nemesis: each channel's history, the
// publishes with their outcomes and every read of it (live deliveries and
// replays), against a sequential log. porcupine (github.com/anishathalye/
// porcupine) checks it, partitioned by channel; a linear-time check of the
// same model (firstViolation) names the first operation that breaks it.
//
// The model. A channel is a log of messages at increasing positions
// (gaps in the positions are allowed: lost ranges, unknown publishes that
// nobody read). Operations:
//
//   - append(m) -> p: a publish acknowledged at p (call: handed to the
//     SDK; return: the acknowledgement), or one of unknown outcome that a
//     reader saw at p (it never returned: return at +infinity, as
//     porcupine expects of operations that did not return). It appends m
//     at p, and p must be above every position appended before it.
//   - read(p) -> m: a reader received m at p (call = return = when the
//     reader got it: the message was in the log then). The log must hold m
//     at p.
//
// A history is linearizable when every operation can take effect at one
// moment within its call and return, in an order that the log allows:
// every acknowledged publish at one position, no position acknowledged for
// two messages, reads see the value that position was acknowledged with,
// and positions increase in real-time order (a publish acknowledged before
// another was sent has the lower position).
//
// The state is the number of claimed positions appended so far. The
// positions claimed (by acknowledgements, or by reads of publishes of
// unknown outcome) are numbered 1, 2, ... in increasing order, with one
// number shared by the claims of one position; an append of claim k is
// legal only as the k-th (positions increase along the log, so a complete
// linearization appends the claims in that order, and two claims of one
// position can never both be appended). A read of the position of claim k
// is legal once k claims are appended and when it read the message of
// that claim. This makes the search nearly deterministic, so porcupine
// finishes on hundreds of thousands of operations.
//
// Left out, without changing the verdict: refused publishes (not stored:
// no-ops; a read of one matches no claim and is illegal); publishes of
// unknown outcome that no reader saw (an append nobody read or a no-op;
// the no-op is always legal and allows the most, so leaving them out
// changes nothing but the search's size); every read of a (position,
// message) but the earliest (a read constrains only how late the append
// may take effect, and the earliest read bounds it most); GAPs (a lost
// range is a count of its own, allowed for N = 1 only).

// linKind is an operation's kind in the log model.
type linKind uint8

const (
	linAppend linKind = iota + 1
	linRead
)

// linIn is an operation's input to the model.
type linIn struct {
	Channel string
	Kind    linKind
	Claim   int    // the claim's number (append: its own; read: the claim of Pos, 0 = none)
	Pos     uint64 // append: where it was acknowledged or read; read: where it read
	ID      MsgID  // append: the message; read: the claim's message (read.Want)
	// Who says who did it, for reports: "pub3", "sub@b", "replay@a".
	Who string
}

// linOut is an operation's output: the message read (reads).
type linOut struct {
	Got   MsgID
	GotOK bool // the payload was one of the run's publishes to this channel
}

// LogModel is the per-channel log model, partitioned by channel.
var LogModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range h {
			ch := op.Input.(linIn).Channel
			if _, ok := by[ch]; !ok {
				order = append(order, ch)
			}
			by[ch] = append(by[ch], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, ch := range order {
			out = append(out, by[ch])
		}
		return out
	},
	Init: func() any { return 0 },
	Step: func(state, input, output any) (bool, any) {
		n, in := state.(int), input.(linIn)
		switch in.Kind {
		case linAppend:
			return in.Claim == n+1, pick(in.Claim == n+1, n+1, n)
		default:
			out := output.(linOut)
			return in.Claim > 0 && in.Claim <= n && out.GotOK && out.Got == in.ID, n
		}
	},
	DescribeOperation: func(input, output any) string {
		in := input.(linIn)
		if in.Kind == linAppend {
			return fmt.Sprintf("%s: append %v -> %d", in.Who, in.ID, in.Pos)
		}
		return fmt.Sprintf("%s: read %d -> %v", in.Who, in.Pos, output.(linOut).Got)
	},
}

// History builds the operations of the log model from what the
// publishers recorded and what the readers received (live and replay
// subscriptions alike); times count from base.
func History(pubs []Publish, readers []Sub, base time.Time) []porcupine.Operation {
	type key struct {
		ch  string
		pos uint64
	}
	byID := map[MsgID]*Publish{}
	for i := range pubs {
		byID[pubs[i].ID] = &pubs[i]
	}
	// The earliest read of each (channel, position, payload).
	type readKey struct {
		key
		payload string
	}
	first := map[readKey]Event{}
	whoRead := map[readKey]string{}
	var readOrder []readKey
	seenAt := map[MsgID]Event{} // unknown publishes: their earliest read
	for _, s := range readers {
		for _, ev := range s.Events {
			if ev.Kind != Message {
				continue
			}
			k := readKey{key{s.Channel, ev.Pos}, string(ev.Payload)}
			if e, ok := first[k]; !ok || ev.At.Before(e.At) {
				if !ok {
					readOrder = append(readOrder, k)
				}
				first[k], whoRead[k] = ev, s.Name
			}
			if ch, id, ok := ParsePayload(ev.Payload); ok && ch == s.Channel {
				if p := byID[id]; p != nil && p.Outcome != Acked && p.Outcome != Refused {
					if e, ok := seenAt[id]; !ok || ev.At.Before(e.At) {
						seenAt[id] = ev
					}
				}
			}
		}
	}
	// The claims: acknowledged publishes, and unknown ones that were read.
	type claim struct {
		p   *Publish
		pos uint64
	}
	var claims []claim
	for i := range pubs {
		p := &pubs[i]
		switch {
		case p.Outcome == Acked:
			claims = append(claims, claim{p, p.Pos})
		case p.Outcome != Refused:
			if ev, ok := seenAt[p.ID]; ok {
				claims = append(claims, claim{p, ev.Pos})
			}
		}
	}
	sort.SliceStable(claims, func(i, j int) bool {
		if claims[i].p.Channel != claims[j].p.Channel {
			return claims[i].p.Channel < claims[j].p.Channel
		}
		return claims[i].pos < claims[j].pos
	})
	number := map[key]int{}   // position -> its claim's number
	holder := map[key]MsgID{} // position -> the message of its first claim
	ns := func(t time.Time) int64 { return t.Sub(base).Nanoseconds() }
	var ops []porcupine.Operation
	n, last := 0, key{}
	for i, c := range claims {
		k := key{c.p.Channel, c.pos}
		if i == 0 || k.ch != last.ch {
			n = 0
		}
		if i == 0 || k != last {
			n++
			number[k], holder[k] = n, c.p.ID
		}
		last = k
		ret := int64(math.MaxInt64) // unknown outcome: it never returned
		if c.p.Outcome == Acked {
			ret = ns(c.p.Done)
		}
		ops = append(ops, porcupine.Operation{ClientId: c.p.ID.Pub,
			Input: linIn{Channel: k.ch, Kind: linAppend, Claim: number[k], Pos: c.pos, ID: c.p.ID, Who: fmt.Sprintf("pub%d", c.p.ID.Pub)},
			Call:  ns(c.p.Sent), Output: linOut{}, Return: ret})
	}
	for _, k := range readOrder {
		ev := first[k]
		ch, id, ok := ParsePayload(ev.Payload)
		at := ns(ev.At)
		ops = append(ops, porcupine.Operation{
			Input:  linIn{Channel: k.ch, Kind: linRead, Claim: number[k.key], Pos: k.pos, ID: holder[k.key], Who: whoRead[k]},
			Call:   at,
			Output: linOut{Got: id, GotOK: ok && ch == k.ch}, Return: at})
	}
	return ops
}

// LinResult is the outcome of the linearizability check.
type LinResult struct {
	Channels, Ops int
	// Verdict is porcupine's over every channel: Ok, Illegal, or Unknown
	// when a channel's check ran out of time (and none was Illegal).
	Verdict  porcupine.CheckResult
	Illegal  []string          // channels porcupine found not linearizable
	Unknown  []string          // channels whose check ran out of time
	Why      map[string]string // channel -> the first violation (firstViolation), for every channel that has one
	Took     time.Duration
	Disagree []string // channels where porcupine's verdict (not Unknown) and firstViolation's differ
}

func (r LinResult) String() string {
	s := fmt.Sprintf("porcupine: %s over %d channels (%d operations) in %v", r.Verdict, r.Channels, r.Ops, r.Took.Round(time.Millisecond))
	if len(r.Illegal) > 0 {
		s += fmt.Sprintf("; not linearizable: %v", r.Illegal)
	}
	if len(r.Unknown) > 0 {
		s += fmt.Sprintf("; unknown (out of time): %v", r.Unknown)
	}
	if len(r.Disagree) > 0 {
		s += fmt.Sprintf("; the exact check disagrees on %v", r.Disagree)
	}
	return s
}

// CheckLinear checks ops (History's) channel by channel, two at a time,
// each within budget divided among the rounds, and runs firstViolation
// beside it.
func CheckLinear(ops []porcupine.Operation, budget time.Duration) LinResult {
	t0 := time.Now()
	parts := LogModel.Partition(ops)
	r := LinResult{Channels: len(parts), Ops: len(ops), Why: map[string]string{}, Verdict: porcupine.Ok}
	const workers = 2
	each := max(budget*workers/time.Duration(max(len(parts), 1)), time.Second)
	verdicts := make([]porcupine.CheckResult, len(parts))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				verdicts[i] = porcupine.CheckOperationsTimeout(LogModel, parts[i], each)
			}
		}()
	}
	for i := range parts {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, part := range parts {
		ch := part[0].Input.(linIn).Channel
		why := firstViolation(part)
		if why != "" {
			r.Why[ch] = why
		}
		switch verdicts[i] {
		case porcupine.Illegal:
			r.Illegal = append(r.Illegal, ch)
			r.Verdict = porcupine.Illegal
		case porcupine.Unknown:
			r.Unknown = append(r.Unknown, ch)
			if r.Verdict == porcupine.Ok {
				r.Verdict = porcupine.Unknown
			}
		}
		if verdicts[i] != porcupine.Unknown && (verdicts[i] == porcupine.Ok) != (why == "") {
			r.Disagree = append(r.Disagree, ch)
		}
	}
	r.Took = time.Since(t0)
	return r
}

// firstViolation decides one channel's history (ops of one channel) in
// linear time and describes the first operation that cannot take effect,
// "" when it is linearizable. Appends take effect in claim order, each as
// early as it can (the later of its call and the moment the claim before
// it took effect): never later than its return, never later than a read
// of its position.
func firstViolation(ops []porcupine.Operation) string {
	var apps, reads []porcupine.Operation
	for _, op := range ops {
		if op.Input.(linIn).Kind == linAppend {
			apps = append(apps, op)
		} else {
			reads = append(reads, op)
		}
	}
	sort.SliceStable(apps, func(i, j int) bool { return apps[i].Input.(linIn).Claim < apps[j].Input.(linIn).Claim })
	at := map[int]int64{}                 // claim -> when it took effect
	from := map[int]porcupine.Operation{} // claim -> the append whose call set that moment
	var now int64 = math.MinInt64
	var setBy porcupine.Operation
	for i, op := range apps {
		in := op.Input.(linIn)
		if i > 0 {
			if prev := apps[i-1].Input.(linIn); prev.Claim == in.Claim {
				return fmt.Sprintf("position %d acknowledged for two messages: %v (%s) and %v (%s)", in.Pos, prev.ID, prev.Who, in.ID, in.Who)
			}
		}
		if op.Call > now {
			now, setBy = op.Call, op
		}
		if now > op.Return {
			by := setBy.Input.(linIn)
			return fmt.Sprintf("%v (%s) acknowledged at position %d at %s, before %v (%s) was sent at %s and took position %d, lower",
				in.ID, in.Who, in.Pos, ms(op.Return), by.ID, by.Who, ms(now), by.Pos)
		}
		at[in.Claim], from[in.Claim] = now, setBy
	}
	sort.SliceStable(reads, func(i, j int) bool { return reads[i].Call < reads[j].Call })
	for _, op := range reads {
		in, out := op.Input.(linIn), op.Output.(linOut)
		switch {
		case !out.GotOK:
			return fmt.Sprintf("%s read a payload at position %d at %s that no publish to this channel sent", in.Who, in.Pos, ms(op.Call))
		case in.Claim == 0:
			return fmt.Sprintf("%s read %v at position %d at %s, a position no publish was acknowledged at", in.Who, out.Got, in.Pos, ms(op.Call))
		case out.Got != in.ID:
			return fmt.Sprintf("%s read %v at position %d at %s, acknowledged for %v", in.Who, out.Got, in.Pos, ms(op.Call), in.ID)
		case at[in.Claim] > op.Call:
			by := from[in.Claim].Input.(linIn)
			return fmt.Sprintf("%s read %v at position %d at %s, before %v (%s, position %d, not above it) was sent at %s",
				in.Who, out.Got, in.Pos, ms(op.Call), by.ID, by.Who, by.Pos, ms(at[in.Claim]))
		}
	}
	return ""
}

// ms prints a history time (ns from the run's base) in seconds.
func ms(ns int64) string {
	if ns == math.MaxInt64 {
		return "never"
	}
	return fmt.Sprintf("+%.3fs", float64(ns)/1e9)
}
