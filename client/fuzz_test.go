package client

import (
	"context"
	"math"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// fuzzMaxBody is the client's frame limit in the fuzz harness.
const fuzzMaxBody = 64 << 10

// fuzzSeeds are server streams for a client that sends HELLO (request id
// 1), then PUBLISH (id 2) and SUBSCRIBE (id 3, subID 1).
func fuzzSeeds() [][]byte {
	w := testWelcome()
	w.MaxBody = fuzzMaxBody
	w.Nodes = []string{"127.0.0.1:7401"}
	welcome := wire.AppendWelcome(nil, 1, w)
	w.Features = wire.FeaturePresence
	pwelcome := wire.AppendWelcome(nil, 1, w) // presence frames for a subscription that did not ask for them are dropped
	cat := func(frames ...[]byte) []byte {
		var b []byte
		for _, f := range frames {
			b = append(b, f...)
		}
		return b
	}
	return [][]byte{
		cat(welcome,
			wire.AppendPubAck(nil, []wire.Ack{{ID: 2, Position: 1}}),
			wire.AppendSubscribed(nil, 3, wire.Subscribed{SubID: 1, First: 1, Earliest: 1, Next: 2, Epoch: 7}),
			wire.AppendData(nil, 1, 1, []byte("a"), []byte("bc")),
			wire.AppendGap(nil, 1, wire.Gap{From: 3, To: 4, Reason: wire.GapSlow}),
			wire.AppendData(nil, 1, 2, []byte("dup"), []byte("dup"), []byte("e")),
			wire.AppendPing(nil, 9),
			wire.AppendUnsubscribed(nil, 4, 1)),
		cat(welcome,
			wire.AppendError(nil, 2, wire.Error{Code: wire.CodePayloadTooLarge}),
			wire.AppendSubscribed(nil, 3, wire.Subscribed{SubID: 1, First: 5, Next: 5, Epoch: 1}),
			wire.AppendData(nil, 1, 9, []byte("hole")),
			wire.AppendGoAway(nil, wire.GoAway{Code: wire.CodeShuttingDown, Text: "bye"})),
		cat(welcome,
			wire.AppendError(nil, 3, wire.Error{Code: wire.CodeInvalidStart, Text: "no"}),
			wire.AppendError(nil, 0, wire.Error{Code: wire.CodeSlowConsumer})),
		cat(pwelcome,
			wire.AppendPubAck(nil, []wire.Ack{{ID: 2, Position: 1}}),
			wire.AppendSubscribed(nil, 3, wire.Subscribed{SubID: 1, First: 1, Earliest: 1, Next: 2, Epoch: 7}),
			wire.AppendOccupancy(nil, 1, wire.FlagEventsPaused, wire.Occupancy{Subscribers: 1}),
			wire.AppendPresenceEvent(nil, 1, []wire.PresenceChange{{Kind: wire.PresenceJoin, Member: wire.Member{Node: []byte("n")}}}),
			wire.AppendPresenceState(nil, 9, wire.FlagMore, wire.Occupancy{}, nil),
			wire.AppendData(nil, 1, 1, []byte("a"))),
		cat(welcome, wire.AppendHeader(nil, wire.TypeData, 0, 1, fuzzMaxBody+1)),
		cat(welcome, []byte{0, 0, 0, 2, byte(wire.TypePubAck), 0, 0, 0, 0, 0, 0, 0}),
		wire.AppendError(nil, 1, wire.Error{Code: wire.CodeUnauthenticated, Text: "token"}),
		welcome[:7],
	}
}

// FuzzServerStream feeds fuzzer bytes to a client as its server's side of
// the stream: the client must not panic, must keep its memory bounded,
// must end with a clean error, must complete every accepted publish, and
// must deliver events in strictly increasing position order.
func FuzzServerStream(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		runServerStream(t, stream)
	})
}

func TestServerStreamSeeds(t *testing.T) {
	for _, s := range fuzzSeeds() {
		runServerStream(t, s)
	}
}

func runServerStream(t *testing.T, stream []byte) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cli, srv := net.Pipe()
	srvDone := make(chan struct{})
	go serveStream(srv, stream, srvDone)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := Dial(ctx, "fuzz",
		WithDialer(func(context.Context, string) (net.Conn, error) { return cli, nil }),
		WithReconnect(false), WithMaxBody(fuzzMaxBody), WithDialTimeout(time.Second))
	if err == nil {
		a, perr := c.PublishAsync(ctx, "ch", []byte("p"))
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		sub, serr := c.Subscribe(sctx, "ch", FromPosition(1), WithBuffer(64))
		scancel()
		if serr == nil {
			checkOrder(t, sub)
		}
		_ = c.Close()
		if perr == nil {
			select {
			case <-a.Done():
			default:
				t.Fatal("accepted publish not completed after Close")
			}
		}
	}
	_ = cli.Close()
	<-srvDone
	runtime.ReadMemStats(&m1)
	if d := m1.TotalAlloc - m0.TotalAlloc; d > 8<<20+4*uint64(len(stream)) {
		t.Fatalf("allocated %d bytes for a %d-byte stream", d, len(stream))
	}
}

// checkOrder reads events until the subscription ends and checks that
// positions strictly increase (restarting at an epoch change).
func checkOrder(t *testing.T, sub *Subscription) {
	var last uint64
	for ev := range sub.Events() {
		switch ev.Kind {
		case KindMessage:
			if ev.Position <= last {
				t.Fatalf("message %d after %d", ev.Position, last)
			}
			last = ev.Position
		case KindGap:
			if ev.Gap.From <= last || ev.Gap.To < ev.Gap.From {
				t.Fatalf("gap %d-%d after %d", ev.Gap.From, ev.Gap.To, last)
			}
			last = ev.Gap.To
		case KindEpochChanged:
			last = ev.Position - min(ev.Position, 1)
		default:
			t.Fatalf("event kind %v", ev.Kind)
		}
	}
	if sub.Err() == nil {
		t.Fatal("events closed without an error")
	}
}

// serveStream plays a server: it reads HELLO, writes the stream's first
// frame, waits for the client's SUBSCRIBE (or its end), writes the rest and
// closes. It reads everything the client sends meanwhile.
func serveStream(nc net.Conn, stream []byte, done chan<- struct{}) {
	defer close(done)
	defer nc.Close()
	rd := wire.NewReader(nc, math.MaxUint16)
	if _, _, err := rd.Next(); err != nil {
		return
	}
	sawSub := make(chan struct{})
	go func() {
		closed := false
		for {
			h, _, err := rd.Next()
			if !closed && (err != nil || h.Type == wire.TypeSubscribe) {
				close(sawSub)
				closed = true
			}
			if err != nil {
				return
			}
		}
	}()
	n := len(stream)
	if _, _, k, err := wire.Split(stream, math.MaxUint32); err == nil {
		n = k
	}
	if _, err := nc.Write(stream[:n]); err != nil || n == len(stream) {
		return
	}
	<-sawSub
	_, _ = nc.Write(stream[n:])
}
