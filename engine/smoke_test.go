package engine

import (
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

func TestSmokePublishSubscribe(t *testing.T) {
	s := startTest(t, nil)
	sub, _ := helloRaw(t, s.Addr())
	sb := sub.subscribe(1, "smoke", wire.StartLive, 0)
	pub, _ := helloRaw(t, s.Addr())
	var pos []uint64
	for i := 0; i < 10; i++ {
		pos = append(pos, pub.publish("smoke", payloadOf(i)))
	}
	if pos[0] != sb.First {
		t.Fatalf("first position %d, SUBSCRIBED said %d", pos[0], sb.First)
	}
	ev := sub.events(10)
	for i, e := range ev {
		if e.pos != pos[i] || e.payload != string(payloadOf(i)) {
			t.Fatalf("event %d = %+v, want pos %d", i, e, pos[i])
		}
	}
}
