package client

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

const testFilter = `payload.price > 100`

func filtersWelcome() wire.Welcome {
	w := testWelcome()
	w.Features = wire.FeatureFilters
	return w
}

// expectSubscribeFilter reads a SUBSCRIBE that must carry flag FILTER.
func (fc *fakeConn) expectSubscribeFilter() (uint32, wire.Subscribe, string) {
	fc.t.Helper()
	h, body := fc.expect(wire.TypeSubscribe)
	if h.Flags&wire.FlagFilter == 0 {
		fc.t.Fatalf("SUBSCRIBE flags %#x, want FILTER", h.Flags)
	}
	s, f, err := wire.DecodeSubscribeFilter(body)
	if err != nil {
		fc.t.Fatal(err)
	}
	s.Channel = bytes.Clone(s.Channel)
	return h.ID, s, string(f)
}

// expectNothingBefore pings the client and fails if any other frame comes
// before the PONG: the client sent nothing else since.
func (fc *fakeConn) expectNothingBefore(pingID uint32) {
	fc.t.Helper()
	fc.write(wire.AppendPing(nil, pingID))
	if h, _ := fc.read(); h.Type != wire.TypePong || h.ID != pingID {
		fc.t.Fatalf("got %v id %d, want only PONG %d", h.Type, h.ID, pingID)
	}
}

// wantFiltersUnsupported checks that err is the filtered subscription's
// end on a server without filters.
func wantFiltersUnsupported(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrFiltersUnsupported) || !strings.Contains(err.Error(), "fake") {
		t.Fatalf("err %v, want ErrFiltersUnsupported naming the server", err)
	}
}

// TestSubscribeFilterWithoutTheFeature: a filtered Subscribe to a server
// that did not accept FeatureFilters fails with ErrFiltersUnsupported, and
// nothing is sent (the server would treat FILTER as malformed, or an older
// one the longer body).
func TestSubscribeFilterWithoutTheFeature(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	_, err := c.Subscribe(ctxT(t), "ch", WithFilter(testFilter))
	wantFiltersUnsupported(t, err)
	fc.expectNothingBefore(5)
}

// TestResumeFilteredToServerWithoutFilters: after a reconnect to a server
// that does not offer filters, the filtered subscription ends with
// ErrFiltersUnsupported, never resubscribed without its filter (it would
// get every message of the channel); the unfiltered subscription of the
// same Conn resumes as usual.
func TestResumeFilteredToServerWithoutFilters(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, filtersWelcome())

	wait := subscribeAsync(t, c, "ch", WithFilter(testFilter))
	id, fs, expr := fc.expectSubscribeFilter()
	if expr != testFilter {
		t.Fatalf("filter %q", expr)
	}
	fc.write(wire.AppendSubscribed(nil, id, wire.Subscribed{SubID: fs.SubID, First: 1, Next: 1, Epoch: 7}))
	filtered, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	plain, ps := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 7})
	fc.write(wire.AppendFData(nil, fs.SubID, []wire.FRecord{{Pos: 3, Body: []byte("f3")}}))
	fc.write(wire.AppendData(nil, ps.SubID, 1, []byte("m1")))
	wantMessage(t, nextEvent(t, filtered), 3, "f3")
	wantMessage(t, nextEvent(t, plain), 1, "m1")
	fc.close()

	fc2 := f.acceptWelcome(testWelcome()) // no FeatureFilters
	id, s2 := fc2.expectSubscribe()       // fails the test if FILTER is set
	if s2.SubID != ps.SubID || s2.Start != wire.StartPosition || s2.Arg != 2 {
		t.Fatalf("resume SUBSCRIBE %+v, want the unfiltered subscription from 2", s2)
	}
	fc2.write(wire.AppendSubscribed(nil, id, wire.Subscribed{SubID: s2.SubID, First: 2, Next: 3, Epoch: 7}))
	fc2.write(wire.AppendData(nil, s2.SubID, 2, []byte("m2")))
	wantMessage(t, nextEvent(t, plain), 2, "m2")
	fc2.expectNothingBefore(9) // no SUBSCRIBE for the filtered one

	_, err = filtered.Next(ctxT(t))
	wantFiltersUnsupported(t, err)
	wantFiltersUnsupported(t, filtered.Err())
	if plain.Err() != nil {
		t.Fatalf("the unfiltered subscription ended: %v", plain.Err())
	}
	// Ended for good: a reconnect to a server with filters does not bring it back.
	fc2.close()
	fc3 := f.acceptWelcome(filtersWelcome())
	if _, s3 := fc3.expectSubscribe(); s3.SubID != ps.SubID {
		t.Fatalf("SUBSCRIBE %+v after the third connection, want only the unfiltered one", s3)
	}
	fc3.expectNothingBefore(10)
}

// TestResumeFilteredKeepsItsFilter: a reconnect to a server with filters
// resumes the filtered subscription with its filter, after the last
// delivered position.
func TestResumeFilteredKeepsItsFilter(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, filtersWelcome())
	wait := subscribeAsync(t, c, "ch", WithFilter(testFilter))
	id, fs, _ := fc.expectSubscribeFilter()
	fc.write(wire.AppendSubscribed(nil, id, wire.Subscribed{SubID: fs.SubID, First: 1, Next: 1, Epoch: 7}))
	sub, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	fc.write(wire.AppendFData(nil, fs.SubID, []wire.FRecord{{Pos: 4, Body: []byte("f4")}}))
	wantMessage(t, nextEvent(t, sub), 4, "f4")
	fc.close()
	fc2 := f.acceptWelcome(filtersWelcome())
	_, s2, expr := fc2.expectSubscribeFilter()
	if expr != testFilter || s2.Start != wire.StartPosition || s2.Arg != 5 || s2.Epoch != 7 {
		t.Fatalf("resume SUBSCRIBE %+v filter %q, want position 5 epoch 7 with the filter", s2, expr)
	}
}

// TestSubscribeFilteredPendingAcrossReconnect: a filtered Subscribe still
// waiting for its SUBSCRIBED when the connection drops fails with
// ErrFiltersUnsupported if the next server does not offer filters.
func TestSubscribeFilteredPendingAcrossReconnect(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, filtersWelcome())
	wait := subscribeAsync(t, c, "ch", WithFilter(testFilter))
	fc.expectSubscribeFilter()
	fc.close() // no answer
	fc2 := f.acceptWelcome(testWelcome())
	_, err := wait()
	wantFiltersUnsupported(t, err)
	fc2.expectNothingBefore(3)
}
