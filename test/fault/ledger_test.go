package fault

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPayloadRoundTrip(t *testing.T) {
	p := Payload("f.3", MsgID{2, 41}, 64)
	if len(p) != 64 {
		t.Fatalf("len %d", len(p))
	}
	ch, id, ok := ParsePayload(p)
	if !ok || ch != "f.3" || id != (MsgID{2, 41}) {
		t.Fatalf("parsed %q %v %v", ch, id, ok)
	}
	for _, bad := range []string{"", "f.3|2|41", "f.3|a|41|", "f.3|2|41|xxy"} {
		if _, _, ok := ParsePayload([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestAccount(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ack := func(seq int, pos uint64) Publish {
		return Publish{Channel: "c", ID: MsgID{1, seq}, Outcome: Acked, Pos: pos, Done: at(0)}
	}
	msg := func(pos uint64, seq, ms int) Event {
		return Event{Kind: Message, Pos: pos, Payload: Payload("c", MsgID{1, seq}, 20), At: at(ms)}
	}
	gap := func(from, to uint64, ms int) Event { return Event{Kind: Gap, From: from, To: to, At: at(ms)} }
	three := []Publish{ack(1, 10), ack(2, 11), ack(3, 12)}
	bound := time.Second
	for _, tc := range []struct {
		name string
		pubs []Publish
		evs  []Event
		from uint64
		want Result
	}{
		{"all delivered", three, []Event{msg(10, 1, 5), msg(11, 2, 6), msg(12, 3, 7)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 3}},
		{"one silent", three, []Event{msg(10, 1, 5), msg(12, 3, 7)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 2, Silent: 1}},
		{"stopped", three, []Event{msg(10, 1, 5)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 1, Silent: 2, Stopped: 1}},
		{"stopped, a hole before", three, []Event{gap(9, 9, 1)}, 0,
			Result{Acked: 3, Expected: 3, Silent: 3, Stopped: 1}},
		{"gap covers", three, []Event{msg(10, 1, 5), gap(11, 11, 6), msg(12, 3, 7)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 2, Announced: 1}},
		{"wide gap covers the rest", three, []Event{gap(5, 100, 6)}, 0,
			Result{Acked: 3, Expected: 3, Announced: 3}},
		{"duplicate", three, []Event{msg(10, 1, 5), msg(11, 2, 6), msg(11, 2, 6), msg(12, 3, 7)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 3, Duplicates: 1}},
		{"out of order", three, []Event{msg(11, 2, 5), msg(10, 1, 6), msg(12, 3, 7)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 3, OutOfOrder: 1}},
		{"gap behind a delivery", three, []Event{msg(10, 1, 5), msg(11, 2, 6), gap(11, 11, 6), msg(12, 3, 7)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 3, OutOfOrder: 1}},
		{"payload of another ack", three, []Event{msg(10, 1, 5), msg(11, 3, 6), msg(12, 3, 7)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 2, Silent: 1, Mismatch: 1, Duplicates: 1}},
		{"acked message at the wrong position", three, []Event{msg(10, 1, 5), msg(11, 2, 6), msg(12, 3, 7), msg(13, 2, 8)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 3, Duplicates: 1, Mismatch: 1}},
		{"never published", three, []Event{msg(10, 1, 5), msg(11, 2, 6), msg(12, 3, 7), msg(13, 9, 8)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 3, Mismatch: 1}},
		{"double ack", append(three, ack(4, 12)), []Event{msg(10, 1, 5), msg(11, 2, 6), msg(12, 3, 7)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 3, DoubleAcks: 1}},
		{"refused yet delivered", append(three, Publish{Channel: "c", ID: MsgID{1, 4}, Outcome: Refused}),
			[]Event{msg(10, 1, 5), msg(11, 2, 6), msg(12, 3, 7), msg(13, 4, 8)}, 0,
			Result{Acked: 3, Refused: 1, Expected: 3, Delivered: 3, RefusedDelivered: 1}},
		{"unknown outcome delivered", append(three, Publish{Channel: "c", ID: MsgID{1, 4}, Outcome: Unknown}),
			[]Event{msg(10, 1, 5), msg(11, 2, 6), msg(12, 3, 7), msg(13, 4, 8)}, 0,
			Result{Acked: 3, Unknown: 1, Expected: 3, Delivered: 3, UnknownDelivered: 1}},
		{"late", three, []Event{msg(10, 1, 5), msg(11, 2, 6), msg(12, 3, 1500)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 3, Late: 1}},
		{"late gap", three, []Event{msg(10, 1, 5), gap(11, 12, 2000)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 1, Announced: 2, Late: 2}},
		{"subscribed after the first", three, []Event{msg(11, 2, 6), msg(12, 3, 7)}, 11,
			Result{Acked: 3, Expected: 2, Delivered: 2}},
		{"epoch change counted", three, []Event{msg(10, 1, 5), {Kind: Epoch, Pos: 11, At: at(6)}, msg(11, 2, 6), msg(12, 3, 7)}, 0,
			Result{Acked: 3, Expected: 3, Delivered: 3, Epochs: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Account(tc.pubs, []Sub{{Name: "s", Channel: "c", From: tc.from, Events: tc.evs}}, bound)
			got.MaxLatency, got.P99Latency, got.Examples, got.Problems, got.StoppedSubs = 0, 0, nil, nil, nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %v\nwant %v", got, tc.want)
			}
			bad := tc.want.Silent + tc.want.Late + tc.want.Duplicates + tc.want.OutOfOrder + tc.want.Mismatch +
				tc.want.DoubleAcks + tc.want.RefusedDelivered
			if got.OK() != (bad == 0) {
				t.Errorf("OK() = %v for %v", got.OK(), got)
			}
		})
	}
}

func TestAccountOtherChannelAndLatency(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pubs := []Publish{
		{Channel: "a", ID: MsgID{1, 1}, Outcome: Acked, Pos: 5, Done: t0},
		{Channel: "b", ID: MsgID{1, 2}, Outcome: Acked, Pos: 5, Done: t0},
	}
	subs := []Sub{
		{Name: "sa", Channel: "a", Events: []Event{{Kind: Message, Pos: 5, Payload: Payload("b", MsgID{1, 2}, 0), At: t0}}},
		{Name: "sb", Channel: "b", Events: []Event{{Kind: Message, Pos: 5, Payload: Payload("b", MsgID{1, 2}, 0), At: t0.Add(300 * time.Millisecond)}}},
	}
	r := Account(pubs, subs, time.Second)
	if r.Mismatch != 1 || r.Silent != 1 || r.Delivered != 1 || r.DoubleAcks != 0 || r.MaxLatency != 300*time.Millisecond {
		t.Fatalf("%v", r)
	}
	if len(r.Examples) != 2 {
		t.Fatalf("examples %q", r.Examples)
	}
}

// TestAccountWithin_Deadlines: each acknowledgement has its own deadline
// (the nemesis extends it past the heal of the fault it falls in), and
// the problems say where and when: the gap that announced acknowledged
// positions, the late and the silent ones, a stopped subscription.
func TestAccountWithin_Deadlines(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var pubs []Publish
	for i := 1; i <= 6; i++ {
		pubs = append(pubs, Publish{Channel: "c", ID: MsgID{1, i}, Outcome: Acked, Pos: uint64(10 + i), Done: at(float64(i))})
	}
	msg := func(i int, s float64) Event {
		return Event{Kind: Message, Pos: uint64(10 + i), Payload: Payload("c", MsgID{1, i}, 20), At: at(s)}
	}
	// Acks at 1..6 s; those at 2 and 3 s fall in a fault healed at 20 s:
	// their deadline is 20 s + 1 s, the others' 1 s after the ack.
	deadline := func(a time.Time) time.Time {
		if !a.Before(at(2)) && a.Before(at(4)) {
			return at(21)
		}
		return a.Add(time.Second)
	}
	evs := []Event{msg(1, 1.5), msg(2, 20.5), {Kind: Gap, From: 13, To: 14, Reason: "lost", At: at(22)}}
	r := AccountWithin(pubs, []Sub{{Name: "sub@b/c", Channel: "c", Events: evs}}, deadline)
	if r.Delivered != 2 || r.Announced != 2 || r.Late != 2 || r.Silent != 2 || r.Stopped != 1 {
		t.Fatalf("%v", r)
	}
	kinds := map[string]Problem{}
	for _, p := range r.Problems {
		kinds[p.Kind] = p
	}
	if p := kinds["announced"]; p.Pos != 13 || !p.At.Equal(at(22)) || !strings.Contains(p.Text, "GAP lost 13..14 covers 2") {
		t.Errorf("announced: %+v", p)
	}
	if p := kinds["late"]; p.Pos != 13 || !p.Acked.Equal(at(3)) {
		t.Errorf("late: %+v", p)
	}
	if p := kinds["stopped"]; p.Pos != 15 || !strings.Contains(p.Text, "stopped after position 14 with no gap; the 2 acknowledged positions 15..16") {
		t.Errorf("stopped: %+v", p)
	}
	for _, e := range r.Examples {
		if strings.Contains(e, "GAP") {
			t.Errorf("a GAP among the examples (it is no problem by itself): %s", e)
		}
	}
}
