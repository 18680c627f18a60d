package client

import (
	"context"
	"errors"
	"net"
	"reflect"
	"sync"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

type ctxKey struct{}

// keyPropagator injects the string under ctxKey as header "trace", the
// way a tracing propagator injects the current span.
type keyPropagator struct{}

func (keyPropagator) Inject(ctx context.Context, hs []Header) []Header {
	if v, ok := ctx.Value(ctxKey{}).(string); ok {
		return append(hs, Header{Key: "trace", Value: v})
	}
	return hs
}

// TestPropagatorInjectsIntoEveryPublish: with WithPropagator, each kind
// of publish carries the headers injected for its own context, after the
// message's own headers, which are not modified; a context without a
// trace adds nothing.
func TestPropagatorInjectsIntoEveryPublish(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, headersWelcome(), WithPropagator(keyPropagator{}))
	traced := func(v string) context.Context { return context.WithValue(ctxT(t), ctxKey{}, v) }
	own := []Header{{Key: "ct", Value: "json"}}
	ownCopy := append(make([]Header, 0, 4), own...) // spare capacity: appending in place would show
	want := []struct {
		flags wire.Flags
		hdrs  []Header
	}{
		{wire.FlagAck | wire.FlagExt, []Header{{Key: "trace", Value: "t1"}}},
		{wire.FlagAck | wire.FlagExt, []Header{{Key: "ct", Value: "json"}, {Key: "trace", Value: "t2"}}},
		{wire.FlagExt, []Header{{Key: "trace", Value: "t3"}}},
		{wire.FlagAck, nil},
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, w := range want {
			id, flags, e := fc.expectPublishExt()
			if got := wire.AppendHeaderFields(nil, e.Headers); flags != w.flags || !reflect.DeepEqual(got, w.hdrs) {
				t.Errorf("publish %d: flags %v headers %v, want %v %v", i, flags, got, w.flags, w.hdrs)
			}
			if flags&wire.FlagAck != 0 {
				fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: uint64(10 + i)}}))
			}
		}
	}()
	if _, err := c.Publish(traced("t1"), "ch", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishMsg(traced("t2"), "ch", Msg{Payload: []byte("b"), Headers: ownCopy}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ownCopy, own) || len(ownCopy[:cap(ownCopy)]) != 4 || ownCopy[:2][1] != (Header{}) {
		t.Fatalf("the message's own headers were changed: %v", ownCopy[:cap(ownCopy)])
	}
	if err := c.PublishNoAck(traced("t3"), "ch", []byte("c")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctxT(t), "ch", []byte("d")); err != nil {
		t.Fatal(err)
	}
	<-done
}

type badPropagator struct{}

func (badPropagator) Inject(_ context.Context, hs []Header) []Header {
	return append(hs, Header{Key: "bad key", Value: "v"})
}

// TestPropagatorInvalidHeader: a header the propagator gets wrong fails
// the publish before anything is sent.
func TestPropagatorInvalidHeader(t *testing.T) {
	f := newFakeServer(t)
	c, _ := connect(t, f, headersWelcome(), WithPropagator(badPropagator{}))
	if _, err := c.Publish(ctxT(t), "ch", []byte("a")); !errors.Is(err, ErrInvalidHeaders) {
		t.Fatalf("Publish: %v, want ErrInvalidHeaders", err)
	}
	if err := c.PublishNoAck(ctxT(t), "ch", []byte("a")); !errors.Is(err, ErrInvalidHeaders) {
		t.Fatalf("PublishNoAck: %v, want ErrInvalidHeaders", err)
	}
}

// BenchmarkPublishNoAck_Propagator: the cost of WithPropagator, off (the
// default: one nil check) and on with a context that carries nothing
// and one that carries a header.
func BenchmarkPublishNoAck_Propagator(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []Option
		ctx  context.Context
	}{
		{"off", nil, context.Background()},
		{"on-untraced", []Option{WithPropagator(keyPropagator{})}, context.Background()},
		{"on-traced", []Option{WithPropagator(keyPropagator{})}, context.WithValue(context.Background(), ctxKey{}, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := Dial(b.Context(), sinkServer(b), bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			payload := make([]byte, 128)
			b.ReportAllocs()
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				if err := c.PublishNoAck(bc.ctx, "bench", payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// sinkServer accepts one client that negotiates headers and reads and
// drops everything it sends (PublishNoAck needs no answer).
func sinkServer(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() { // ends when the client closes
		defer wg.Done()
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		rd := wire.NewReader(nc, wire.MaxBodyFor(1<<20))
		h, _, err := rd.Next()
		if err != nil {
			return
		}
		if _, err := nc.Write(wire.AppendWelcome(nil, h.ID, headersWelcome())); err != nil {
			return
		}
		for {
			if _, _, err := rd.Next(); err != nil {
				return
			}
		}
	}()
	return ln.Addr().String()
}
