package fault

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// linCase builds histories of channel "c" with times in milliseconds from
// base.
type linCase struct {
	pubs []Publish
	subs []Sub
}

var linBase = time.Unix(5000, 0)

func msAt(ms int) time.Time { return linBase.Add(time.Duration(ms) * time.Millisecond) }

func (c *linCase) pub(seq int, out Outcome, pos uint64, sent, done int) *linCase {
	c.pubs = append(c.pubs, Publish{Channel: "c", ID: MsgID{1, seq}, Outcome: out, Pos: pos, Sent: msAt(sent), Done: msAt(done)})
	return c
}

// read adds a reader that got message seq (0: a payload no publisher
// sent) at pos at time at.
func (c *linCase) read(who string, pos uint64, seq, at int) *linCase {
	p := []byte("not a publish")
	if seq > 0 {
		p = Payload("c", MsgID{1, seq}, 20)
	}
	c.subs = append(c.subs, Sub{Name: who, Channel: "c", Events: []Event{{Kind: Message, Pos: pos, Payload: p, At: msAt(at)}}})
	return c
}

func (c *linCase) check(t *testing.T) (porcupine.CheckResult, string) {
	t.Helper()
	ops := History(c.pubs, c.subs, linBase)
	return porcupine.CheckOperationsTimeout(LogModel, ops, 10*time.Second), firstViolation(ops)
}

// TestLogModel: histories the log allows are linearizable; each way of
// breaking it is not, and the exact check names the break.
func TestLogModel(t *testing.T) {
	three := func() *linCase {
		return new(linCase).pub(1, Acked, 10, 0, 5).pub(2, Acked, 11, 1, 6).pub(3, Acked, 12, 2, 7)
	}
	for _, tc := range []struct {
		name string
		c    *linCase
		why  string // "" = linearizable; else a part of firstViolation's text
	}{
		{"acked and read", three().read("s", 10, 1, 8).read("s", 11, 2, 9).read("s", 12, 3, 9), ""},
		{"acked, nothing read", three(), ""},
		{"read before the ack (in flight)", three().read("s", 12, 3, 3), ""},
		{"concurrent publishes in either order", new(linCase).pub(1, Acked, 11, 0, 9).pub(2, Acked, 10, 1, 8), ""},
		{"positions with holes (a lost range)", new(linCase).pub(1, Acked, 10, 0, 1).pub(2, Acked, 500, 2, 3).read("s", 500, 2, 4), ""},
		{"unknown outcome, read", three().pub(4, Unknown, 0, 8, 9).read("r", 13, 4, 20), ""},
		{"unknown outcome, never read", three().pub(4, Unknown, 0, 8, 9), ""},
		{"never answered, read", three().pub(4, Pending, 0, 8, 0).read("r", 13, 4, 20), ""},
		{"refused, not read", three().pub(4, Refused, 0, 8, 9), ""},
		{"one position acked twice", three().pub(4, Acked, 11, 3, 8), "position 11 acknowledged for two messages"},
		{"read another message than acked", three().read("s", 11, 3, 9), "acknowledged for {1 2}"},
		{"read an acked message at another position", three().read("s", 13, 2, 9), "a position no publish was acknowledged at"},
		{"positions against real time", new(linCase).pub(1, Acked, 11, 0, 5).pub(2, Acked, 10, 6, 8), "took position 10, lower"},
		{"read before it was sent", three().read("s", 12, 3, 1), "before {1 3}"},
		{"read a position below one sent later", new(linCase).pub(1, Acked, 10, 5, 8).pub(2, Acked, 11, 0, 4).read("s", 11, 2, 4),
			"took position 10, lower"},
		{"refused, yet read", three().pub(4, Refused, 0, 8, 9).read("r", 13, 4, 20), "a position no publish was acknowledged at"},
		{"unknown, read at an acked position", three().pub(4, Unknown, 0, 1, 9).read("r", 12, 4, 20), "acknowledged for two messages"},
		{"a payload no publisher sent", three().read("s", 12, 0, 9), "no publish to this channel sent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verdict, why := tc.c.check(t)
			want := porcupine.Ok
			if tc.why != "" {
				want = porcupine.Illegal
			}
			if verdict != want {
				t.Errorf("porcupine: %s, want %s", verdict, want)
			}
			if (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
				t.Errorf("firstViolation: %q, want %q", why, tc.why)
			}
		})
	}
}

// TestLogModel_AgreesWithPorcupine is a differential test: on 3,000
// random small histories (publishes acknowledged at random positions at
// random times, some unknown or refused, reads of random positions and
// messages), the linear-time check and porcupine's search give the same
// verdict. Both pass through History, so this checks the exact check
// against porcupine's exhaustive one, not the model against itself.
func TestLogModel_AgreesWithPorcupine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	illegal := 0
	for i := 0; i < 3000; i++ {
		c := new(linCase)
		n := 1 + r.IntN(5)
		for seq := 1; seq <= n; seq++ {
			sent := r.IntN(20)
			out := []Outcome{Acked, Acked, Acked, Unknown, Refused}[r.IntN(5)]
			c.pub(seq, out, uint64(1+r.IntN(n+1)), sent, sent+r.IntN(10))
		}
		for k := r.IntN(4); k > 0; k-- {
			c.read("s", uint64(1+r.IntN(n+1)), r.IntN(n+1), r.IntN(30))
		}
		verdict, why := c.check(t)
		if verdict == porcupine.Unknown {
			t.Fatalf("history %d: porcupine ran out of time", i)
		}
		if (verdict == porcupine.Ok) != (why == "") {
			t.Fatalf("history %d: porcupine %s, the exact check %q\npublishes %+v\nreads %+v", i, verdict, why, c.pubs, c.subs)
		}
		if why != "" {
			illegal++
		}
	}
	if illegal < 300 || illegal > 2700 {
		t.Fatalf("%d of 3000 histories illegal: the generator tests one verdict only", illegal)
	}
}

// TestCheckLinear_Channels: CheckLinear partitions by channel and names
// the channel that breaks the log, with the reason.
func TestCheckLinear_Channels(t *testing.T) {
	var pubs []Publish
	var subs []Sub
	for _, ch := range []string{"x", "y", "z"} {
		for seq := 1; seq <= 50; seq++ {
			id := MsgID{len(ch), seq}
			pubs = append(pubs, Publish{Channel: ch, ID: id, Outcome: Acked, Pos: uint64(100 + seq), Sent: msAt(seq), Done: msAt(seq + 3)})
			subs = append(subs, Sub{Name: "s", Channel: ch, Events: []Event{{Kind: Message, Pos: uint64(100 + seq),
				Payload: Payload(ch, id, 20), At: msAt(seq + 2)}}})
		}
	}
	// y's position 120 read with the message acked at 121.
	subs = append(subs, Sub{Name: "replay@b", Channel: "y", Events: []Event{{Kind: Message, Pos: 120, Payload: Payload("y", MsgID{1, 21}, 20), At: msAt(90)}}})
	r := CheckLinear(History(pubs, subs, linBase), 30*time.Second)
	if r.Verdict != porcupine.Illegal || len(r.Illegal) != 1 || r.Illegal[0] != "y" || r.Channels != 3 || len(r.Disagree) != 0 {
		t.Fatalf("%v", r)
	}
	if why := r.Why["y"]; !strings.Contains(why, "replay@b read {1 21} at position 120") {
		t.Fatalf("why: %q", why)
	}
	if !strings.Contains(r.String(), "not linearizable: [y]") {
		t.Fatalf("%s", r)
	}
}
