package engine

import (
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// TestSubscribe_FailedLookupIsUnavailable: a SUBSCRIBE whose channel
// lookup gets no answer (here the cluster's pool of control-plane calls
// is full, so the lookup cannot even start) is answered ERROR UNAVAILABLE,
// retriable, and leaves no subscription. Before, the gateway took the
// failed lookup's empty answer for the channel's state: SUBSCRIBED at
// position 0 with epoch 0 and the loop's live cursor at 0, so that once
// the channel had messages its subscribers got GAP 0..first-1 "expired"
// for positions that never existed (TestCluster_BurstToRemoteHostKeepsOrder
// under load, where a lookup failed). Once the pool drains the same
// SUBSCRIBE succeeds and the subscriber gets the first message, no gap.
func TestSubscribe_FailedLookupIsUnavailable(t *testing.T) {
	nodes := startCluster3(t, nil)
	a, b := nodes[0], nodes[1]
	ch := channelManagedBy(t, b, "c", "lookup")
	sub, _ := helloRaw(t, b.Addr())
	release := make(chan struct{})
	blocked := 0
	for b.clu().Go(func() { <-release }) {
		blocked++
	}
	t.Logf("%d calls fill b's pool", blocked)
	sb := wire.Subscribe{SubID: 1, Start: wire.StartLive, Channel: []byte(ch)}
	if err := sub.writeErr(wire.AppendSubscribe(nil, sub.nextID(), sb)); err != nil {
		close(release)
		t.Fatal(err)
	}
	h, body := sub.next()
	close(release)
	if h.Type == wire.TypeSubscribed {
		s, _ := wire.DecodeSubscribed(body)
		t.Fatalf("SUBSCRIBE without an answer from the control plane answered SUBSCRIBED %+v, want ERROR UNAVAILABLE", s)
	}
	if e, err := wire.DecodeError(h, body); h.Type != wire.TypeError || err != nil || e.Code != wire.CodeUnavailable || !e.Retriable {
		t.Fatalf("SUBSCRIBE without an answer from the control plane answered %s, want ERROR UNAVAILABLE (retriable)", describe(h, body))
	}
	// The same id again (the refused one left nothing), as a client
	// retries UNAVAILABLE, until the released calls have left the pool.
	var s wire.Subscribed
	eventually(t, waitFor, "SUBSCRIBE succeeds once the pool drained", func() bool {
		var err error
		s, err = sub.subscribeErr(sb)
		return err == nil
	})
	if s.First == 0 || s.Epoch == 0 {
		t.Fatalf("SUBSCRIBED %+v", s)
	}
	pub, _ := helloRaw(t, a.Addr())
	pos, err := pub.publishBatch(ch, [][]byte{payloadOf(0)})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := sub.eventsUntil(1, pos[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, gaps, err := checkStream(evs, 1, pos[0], pos[0]); err != nil || len(gaps) != 0 {
		t.Fatalf("subscriber: %v, gaps %v", err, gaps)
	}
}
