package engine

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client"
	"github.com/sluice-rtm/sluice/wire"
)

// filterFeatures: what the filter tests' subscribers negotiate.
const filterFeatures = wire.FeatureFilters | wire.FeatureHeaders

// subscribeFiltered sends SUBSCRIBE with FILTER and returns SUBSCRIBED
// (failing the test on anything else).
func (c *rawConn) subscribeFiltered(subID uint32, ch string, k wire.StartKind, arg uint64, filter string) wire.Subscribed {
	c.t.Helper()
	id := c.nextID()
	c.write(wire.AppendSubscribeFilter(nil, id, wire.Subscribe{SubID: subID, Start: k, Arg: arg, Channel: []byte(ch)}, filter))
	for {
		h, body := c.next()
		if h.Type == wire.TypePing {
			continue
		}
		if h.Type != wire.TypeSubscribed || h.ID != id {
			c.t.Fatalf("want SUBSCRIBED id %d, got %s", id, describe(h, body))
		}
		s, err := wire.DecodeSubscribed(body)
		if err != nil {
			c.t.Fatal(err)
		}
		return s
	}
}

// fev is what a filtered subscriber received: a message (pos, payload,
// ext) or a GAP.
type fev struct {
	pos     uint64
	payload string
	ext     bool
	gap     *wire.Gap
}

// filtered reads until subscription subID got a message at position last
// or later (or a GAP reaching it), and returns its events; DATA for it is
// a failure.
func (c *rawConn) filtered(subID uint32, last uint64) []fev {
	c.t.Helper()
	var out []fev
	for {
		h, body := c.next()
		switch {
		case h.Type == wire.TypeFData && h.ID == subID:
			_, entries, err := wire.DecodeFData(body)
			if err != nil {
				c.t.Fatal(err)
			}
			for pos, b, ext, rest, ok := wire.NextFEntry(entries); ok; pos, b, ext, rest, ok = wire.NextFEntry(rest) {
				out = append(out, fev{pos: pos, payload: string(wire.RecordPayload(b, ext)), ext: ext})
				if pos >= last {
					return out
				}
			}
		case h.Type == wire.TypeGap && h.ID == subID:
			g, err := wire.DecodeGap(body)
			if err != nil {
				c.t.Fatal(err)
			}
			out = append(out, fev{gap: &g})
			if g.To >= last {
				return out
			}
		case h.Type == wire.TypeData && h.ID == subID:
			c.t.Fatalf("DATA for filtered subscription %d", subID)
		case h.Type == wire.TypeError || h.Type == wire.TypeGoAway:
			c.t.Fatalf("got %s", describe(h, body))
		}
	}
}

// publishTyped publishes n messages to ch: message i has header type
// "t" when i%3 == 0, else "q", and payload {"n":i}; it returns their
// positions.
func publishTyped(t *testing.T, c *rawConn, ch string, from, n int) []uint64 {
	t.Helper()
	var pos []uint64
	for i := from; i < from+n; i++ {
		typ := "q"
		if i%3 == 0 {
			typ = "t"
		}
		f := wire.AppendPublishExt(nil, c.nextID(), wire.FlagAck, ch, nil, []wire.HeaderField{{Key: "type", Value: typ}},
			fmt.Appendf(nil, `{"n":%d}`, i))
		pos = append(pos, c.publishFrame(f))
	}
	return pos
}

// matching returns the positions of publishTyped's messages that
// `headers.type == "t" && payload.n > min` selects.
func matching(pos []uint64, from, min int) []uint64 {
	var out []uint64
	for k, p := range pos {
		if i := from + k; i%3 == 0 && i > min {
			out = append(out, p)
		}
	}
	return out
}

func positionsOf(evs []fev) []uint64 {
	var out []uint64
	for _, e := range evs {
		if e.gap == nil {
			out = append(out, e.pos)
		}
	}
	return out
}

// TestFilterSelectsWithChannelPositions: a filtered subscriber gets only
// the matching messages, at their channel positions (holes that are not
// gaps), as stored (headers and all) with FeatureHeaders and as payloads
// without; an unfiltered subscriber of the same channel gets everything in
// DATA; the filter is evaluated once per message for both filtered
// subscribers.
func TestFilterSelectsWithChannelPositions(t *testing.T) {
	s := startTest(t, nil)
	const expr = `headers.type == "t" && payload.n > 4`
	fsub, _ := helloFeat(t, s.Addr(), filterFeatures)
	plain, _ := helloFeat(t, s.Addr(), wire.FeatureFilters) // no headers: payloads alone
	all, _ := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	fsub.subscribeFiltered(1, "fl", wire.StartLive, 0, expr)
	plain.subscribeFiltered(2, "fl", wire.StartLive, 0, expr)
	all.subscribe(3, "fl", wire.StartLive, 0)
	pub, _ := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	pos := publishTyped(t, pub, "fl", 0, 20)
	want := matching(pos, 0, 4) // n = 6, 9, 12, 15, 18
	got := fsub.filtered(1, want[len(want)-1])
	if !reflect.DeepEqual(positionsOf(got), want) {
		t.Fatalf("filtered positions %v, want %v", positionsOf(got), want)
	}
	for i, e := range got {
		if !e.ext || e.payload != fmt.Sprintf(`{"n":%d}`, 6+3*i) {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	for i, e := range plain.filtered(2, want[len(want)-1]) {
		if e.ext || e.payload != fmt.Sprintf(`{"n":%d}`, 6+3*i) || e.pos != want[i] {
			t.Fatalf("without headers, entry %d: %+v", i, e)
		}
	}
	if evs := all.events(20); len(evs) != 20 || evs[19].pos != pos[19] {
		t.Fatalf("unfiltered subscriber got %d events", len(evs))
	}
	if m := s.Metrics(t.Context()); m.FilterEvals != 20 || m.Filters != 1 {
		t.Fatalf("%d evaluations of %d filters, want 20 of 1", m.FilterEvals, m.Filters)
	}
}

// TestFilterEvaluatedOncePerGateway: subscribers of one filter on every
// loop (connections are spread over the loops) cost one evaluation per
// message; a second distinct filter costs one more.
func TestFilterEvaluatedOncePerGateway(t *testing.T) {
	s := startTest(t, func(o *Options) { o.Loops = 3 })
	var subs []*rawConn
	for range 6 {
		c, _ := helloFeat(t, s.Addr(), filterFeatures)
		c.subscribeFiltered(1, "once", wire.StartLive, 0, `headers.type == "t"`)
		subs = append(subs, c)
	}
	other, _ := helloFeat(t, s.Addr(), filterFeatures)
	other.subscribeFiltered(2, "once", wire.StartLive, 0, `payload.n >= 0`)
	pub, _ := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	pos := publishTyped(t, pub, "once", 0, 30)
	want := matching(pos, 0, -1)
	for i, c := range subs {
		if got := positionsOf(c.filtered(1, want[len(want)-1])); !reflect.DeepEqual(got, want) {
			t.Fatalf("subscriber %d: %v, want %v", i, got, want)
		}
	}
	if got := positionsOf(other.filtered(2, pos[len(pos)-1])); len(got) != 30 {
		t.Fatalf("second filter: %d messages, want 30", len(got))
	}
	if m := s.Metrics(t.Context()); m.FilterEvals != 60 || m.Filters != 2 {
		t.Fatalf("%d evaluations of %d filters, want 60 of 2", m.FilterEvals, m.Filters)
	}
}

// TestFilterRefusals: an expression that does not compile gets the
// non-fatal INVALID_FILTER; FILTER without FeatureFilters is malformed;
// past MaxFilters distinct filters a SUBSCRIBE gets UNAVAILABLE, and a
// filter whose last subscriber left frees its place.
func TestFilterRefusals(t *testing.T) {
	s := startTest(t, func(o *Options) { o.MaxFilters = 2 })
	c, _ := helloFeat(t, s.Addr(), filterFeatures)
	for i, bad := range []string{`headers.type ==`, `payload.n + 1`, strings.Repeat("x", wire.MaxFilterLen+1)} {
		id := uint32(100 + i)
		c.write(wire.AppendSubscribeFilter(nil, id, wire.Subscribe{SubID: id, Channel: []byte("r")}, bad))
		h, body := c.next()
		expectCode(t, h, body, wire.CodeInvalidFilter, id)
	}
	c.expectUsable()
	c.subscribeFiltered(1, "r", wire.StartLive, 0, `payload.a == 1`)
	c.subscribeFiltered(2, "r", wire.StartLive, 0, `payload.a == 2`)
	c.subscribeFiltered(3, "r", wire.StartLive, 0, `payload.a == 1`) // the same: no new place
	c.write(wire.AppendSubscribeFilter(nil, 50, wire.Subscribe{SubID: 4, Channel: []byte("r")}, `payload.a == 3`))
	h, body := c.next()
	expectCode(t, h, body, wire.CodeUnavailable, 50)
	c.write(wire.AppendUnsubscribe(nil, 51, 2))
	if h, _ := c.next(); h.Type != wire.TypeUnsubscribed {
		t.Fatalf("got %v", h.Type)
	}
	c.subscribeFiltered(4, "r", wire.StartLive, 0, `payload.a == 3`)
	if m := s.Metrics(t.Context()); m.Filters != 2 {
		t.Fatalf("filters %d, want 2", m.Filters)
	}
	plain, _ := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	plain.write(wire.AppendSubscribeFilter(nil, 9, wire.Subscribe{SubID: 1, Channel: []byte("r")}, `true`))
	h, body = plain.next()
	expectCode(t, h, body, wire.CodeProtocolError, 0)
}

// TestFilterAcrossRolloverAndReconnect: with 7-message streamlets, a
// filtered subscriber reads the matches of 60 messages across several
// streamlets from the earliest one, its connection is dropped part way,
// and a new connection resuming from the last delivered position + 1 with
// the same filter gets exactly the rest: every match once, in order.
func TestFilterAcrossRolloverAndReconnect(t *testing.T) {
	s := startTest(t, func(o *Options) { o.LimitMsgs = 7 })
	pub, _ := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	pos := publishTyped(t, pub, "roll", 0, 30) // before the subscriber: read from history
	const expr = `headers.type == "t" && payload.n > 1`
	c, _ := helloFeat(t, s.Addr(), filterFeatures)
	c.subscribeFiltered(1, "roll", wire.StartEarliest, 0, expr)
	pos = append(pos, publishTyped(t, pub, "roll", 30, 30)...) // and live
	want := matching(pos, 0, 1)
	first := positionsOf(c.filtered(1, want[8]))
	if !reflect.DeepEqual(first, want[:9]) {
		t.Fatalf("before the drop: %v, want %v", first, want[:9])
	}
	c.nc.Close()
	c2, _ := helloFeat(t, s.Addr(), filterFeatures)
	c2.subscribeFiltered(1, "roll", wire.StartPosition, first[len(first)-1]+1, expr)
	rest := positionsOf(c2.filtered(1, want[len(want)-1]))
	if !reflect.DeepEqual(rest, want[9:]) {
		t.Fatalf("after the resume: %v, want %v", rest, want[9:])
	}
	info, _, _ := s.mgr.Info("roll", false)
	if len(info.Streamlets) < 8 {
		t.Fatalf("%d streamlets: the test must span a rollover", len(info.Streamlets))
	}
}

// TestFilterGetsGapNotices: a filtered subscriber starting in history
// that expired is told the missing range with GAP, as any other, then
// gets the matches of what is retained.
func TestFilterGetsGapNotices(t *testing.T) {
	clock := newTestClock()
	s := startTest(t, func(o *Options) { o.LimitMsgs, o.TTL, o.now = 3, time.Minute, clock.Now })
	pub, _ := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	pos := publishTyped(t, pub, "gaps", 0, 6) // streamlets [1..3] (closed) and [4..6]
	clock.Advance(2 * time.Minute)
	pos = append(pos, publishTyped(t, pub, "gaps", 6, 1)...) // closes [4..6]
	eventually(t, waitFor, "the first streamlet expired", func() bool {
		info, _, _ := s.mgr.Info("gaps", false)
		return info.Earliest > pos[0]
	})
	info, _, _ := s.mgr.Info("gaps", false)
	c, _ := helloFeat(t, s.Addr(), filterFeatures)
	sb := c.subscribeFiltered(1, "gaps", wire.StartPosition, pos[0], `headers.type == "t"`)
	evs := c.filtered(1, pos[6])
	if sb.First != info.Earliest || evs[0].gap == nil || evs[0].gap.From != pos[0] || evs[0].gap.To != info.Earliest-1 {
		t.Fatalf("SUBSCRIBED %+v, first event %+v: want GAP %d-%d", sb, evs[0], pos[0], info.Earliest-1)
	}
	var want []uint64
	for i, p := range pos {
		if i%3 == 0 && p >= info.Earliest {
			want = append(want, p)
		}
	}
	if got := positionsOf(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("positions %v, want %v", got, want)
	}
}

// TestFilterFramesWithinBodyLimit: a batch of many small matches is split
// into FDATA frames that each fit the client's body limit, and together
// carry every match in order.
func TestFilterFramesWithinBodyLimit(t *testing.T) {
	s := startTest(t, func(o *Options) { o.MaxPayload = 1024 }) // maxBody 8,192
	pub, w := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	var last uint64
	batch := make([][]byte, 3000)
	for i := range batch {
		batch[i] = []byte{'x'}
	}
	ps, err := pub.publishBatch("small", batch)
	if err != nil {
		t.Fatal(err)
	}
	last = ps[len(ps)-1]
	c, _ := helloFeat(t, s.Addr(), filterFeatures)
	c.subscribeFiltered(1, "small", wire.StartEarliest, 0, `true`)
	n, frames := 0, 0
	next := ps[0]
	for next <= last {
		h, body := c.next()
		if h.Type != wire.TypeFData {
			continue
		}
		if len(body) > int(w.MaxBody) {
			t.Fatalf("FDATA body of %d bytes, limit %d", len(body), w.MaxBody)
		}
		_, entries, err := wire.DecodeFData(body)
		if err != nil {
			t.Fatal(err)
		}
		frames++
		for pos, _, _, rest, ok := wire.NextFEntry(entries); ok; pos, _, _, rest, ok = wire.NextFEntry(rest) {
			if pos != next {
				t.Fatalf("position %d, want %d", pos, next)
			}
			next++
			n++
		}
	}
	if n != len(batch) || frames < 4 {
		t.Fatalf("%d messages in %d frames", n, frames)
	}
}

// TestFilterSDKResumesAfterCut: the Go SDK's filtered subscription loses
// its connection right after its first FDATA, reconnects on its own and
// resumes after the last message delivered: every match exactly once, in
// order, at its channel position, and no gap event for the holes.
func TestFilterSDKResumesAfterCut(t *testing.T) {
	s := startTest(t, func(o *Options) { o.LimitMsgs = 5 })
	px := newCutProxyAfter(t, s.Addr(), wire.TypeFData)
	ctx := t.Context()
	cl, err := client.Dial(ctx, px.ln.Addr().String(), client.WithBackoff(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sub, err := cl.Subscribe(ctx, "sdkf", client.WithFilter(`headers.type == "t" && payload.n > 1`))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	pos := publishTyped(t, pub, "sdkf", 0, 40)
	want := matching(pos, 0, 1)
	rctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	for i, w := range want {
		ev, err := sub.Next(rctx)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.Kind != client.KindMessage || ev.Position != w || string(ev.Payload) != fmt.Sprintf(`{"n":%d}`, 6+3*i-3) ||
			len(ev.Headers) != 1 || ev.Headers[0].Value != "t" {
			t.Fatalf("event %d: %+v, want the message at %d", i, ev, w)
		}
	}
	if px.cuts.Load() < 1 {
		t.Fatal("the connection was not cut")
	}
	if sub.Filter() == "" {
		t.Fatal("Filter() is empty")
	}
}
