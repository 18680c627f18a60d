//go:build !race

package client

import (
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// ackAll acknowledges every acked PUBLISH the fake server reads.
func ackAll(fc *fakeConn) {
	var acks []wire.Ack
	var pos uint64
	for {
		_ = fc.nc.SetReadDeadline(time.Now().Add(testTimeout))
		h, _, err := fc.rd.Next()
		if err != nil {
			return
		}
		if h.Type == wire.TypePublish && h.Flags&wire.FlagAck != 0 {
			pos++
			acks = append(acks, wire.Ack{ID: h.ID, Position: pos})
		}
		if fc.rd.Buffered() == 0 && len(acks) > 0 {
			if _, err := fc.nc.Write(wire.AppendPubAck(nil, acks)); err != nil {
				return
			}
			acks = acks[:0]
		}
	}
}

// TestPublishExtZeroAllocs: publishing with headers and an id, and
// publishing with WithIdempotence (automatic ids, frames kept for a
// resend), does not allocate per message in steady state.
func TestPublishExtZeroAllocs(t *testing.T) {
	c, fc := connect(t, newFakeServer(t), headersWelcome(), WithMaxPending(4096), WithIdempotence(0))
	go ackAll(fc)
	ctx := ctxT(t)
	payload := make([]byte, 128)
	m := Msg{Payload: payload, ID: []byte("order-00017"), Headers: []Header{{Key: "traceparent", Value: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}
	for _, tc := range []struct {
		name string
		fn   func()
	}{
		{"PublishMsgAsync headers+id", func() {
			a, err := c.PublishMsgAsync(ctx, "ch", m)
			if err != nil {
				t.Fatal(err)
			}
			a.Release()
		}},
		{"PublishAsync idempotent", func() {
			a, err := c.PublishAsync(ctx, "ch", payload)
			if err != nil {
				t.Fatal(err)
			}
			a.Release()
		}},
	} {
		name, fn := tc.name, tc.fn
		// Warm the pools with this kind of publish (frame sizes differ),
		// then wait for every PUBACK.
		for range 4000 {
			fn()
		}
		if _, err := c.Publish(ctx, "ch", payload); err != nil {
			t.Fatal(err)
		}
		if got := testing.AllocsPerRun(2000, fn); got > 0.05 {
			t.Errorf("%s: %.3f allocs per publish", name, got)
		}
	}
}
