package client

import (
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// ackServer answers every PUBLISH with FlagAck read in one read batch with one PUBACK,
// positions counting up, until the connection closes.
func ackServer(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
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
		if _, err := nc.Write(wire.AppendWelcome(nil, h.ID, testWelcome())); err != nil {
			return
		}
		var pos uint64
		var acks []wire.Ack
		var out []byte
		for {
			h, _, err := rd.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
					b.Log(err)
				}
				return
			}
			if h.Type == wire.TypePublish && h.Flags&wire.FlagAck != 0 {
				pos++
				acks = append(acks, wire.Ack{ID: h.ID, Position: pos})
			}
			if rd.Buffered() == 0 || len(acks) == wire.MaxAcks {
				if len(acks) > 0 {
					out = wire.AppendPubAck(out[:0], acks)
					acks = acks[:0]
					if _, err := nc.Write(out); err != nil {
						return
					}
				}
			}
		}
	}()
	return ln.Addr().String()
}

func benchConn(b *testing.B) *Conn {
	c, err := Dial(b.Context(), ackServer(b), WithMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// BenchmarkPublish: one synchronous publish at a time (a round trip each).
func BenchmarkPublish(b *testing.B) {
	c := benchConn(b)
	payload := make([]byte, 16)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Publish(b.Context(), "bench", payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishFunc: pipelined publishes with a reused callback; the
// timer stops after every acknowledgement arrived.
func BenchmarkPublishFunc(b *testing.B) {
	for _, size := range []int{16, 128, 1024} {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			c := benchConn(b)
			payload := make([]byte, size)
			var wg sync.WaitGroup
			var failed error
			var mu sync.Mutex
			done := func(_ uint64, err error) {
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
				}
				wg.Done()
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				wg.Add(1)
				if err := c.PublishFunc(b.Context(), "bench", payload, done); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
			if failed != nil {
				b.Fatal(failed)
			}
		})
	}
}

// BenchmarkPublishAsync: pipelined publishes with a PubAck each.
func BenchmarkPublishAsync(b *testing.B) {
	c := benchConn(b)
	payload := make([]byte, 16)
	acks := make([]*PubAck, 0, 4096)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		a, err := c.PublishAsync(b.Context(), "bench", payload)
		if err != nil {
			b.Fatal(err)
		}
		if acks = append(acks, a); len(acks) == cap(acks) {
			for _, a := range acks {
				if _, err := a.Wait(b.Context()); err != nil {
					b.Fatal(err)
				}
				a.Release()
			}
			acks = acks[:0]
		}
	}
	for _, a := range acks {
		if _, err := a.Wait(b.Context()); err != nil {
			b.Fatal(err)
		}
		a.Release()
	}
}

// BenchmarkPublishNoAck: fire-and-forget publishes; the timer stops after
// one acknowledged publish behind them, so every frame reached the peer.
func BenchmarkPublishNoAck(b *testing.B) {
	for _, size := range []int{16, 128, 1024} {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			c := benchConn(b)
			payload := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if err := c.PublishNoAck(b.Context(), "bench", payload); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := c.Publish(b.Context(), "bench", payload); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// dataServer answers one SUBSCRIBE and then streams DATA frames of batch
// messages of size bytes each, positions counting up, until the connection
// closes.
func dataServer(b *testing.B, batch, size int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
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
		if _, err := nc.Write(wire.AppendWelcome(nil, h.ID, testWelcome())); err != nil {
			return
		}
		h, body, err := rd.Next()
		if err != nil {
			return
		}
		s, err := wire.DecodeSubscribe(body)
		if err != nil {
			return
		}
		if _, err := nc.Write(wire.AppendSubscribed(nil, h.ID, wire.Subscribed{SubID: s.SubID, First: 1, Next: 1, Epoch: 1})); err != nil {
			return
		}
		go func() { // read (and ignore) what the client sends, e.g. PINGs
			for {
				if _, _, err := rd.Next(); err != nil {
					return
				}
			}
		}()
		payload := make([]byte, size)
		payloads := make([][]byte, batch)
		for i := range payloads {
			payloads[i] = payload
		}
		var frame []byte
		for pos := uint64(1); ; pos += uint64(batch) {
			frame = wire.AppendData(frame[:0], s.SubID, pos, payloads...)
			if _, err := nc.Write(frame); err != nil {
				return
			}
		}
	}()
	return ln.Addr().String()
}

// BenchmarkSubscribeNext: messages delivered to one subscription through
// Next, from DATA frames of 100 messages.
func BenchmarkSubscribeNext(b *testing.B) {
	for _, size := range []int{16, 128, 1024} {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			c, err := Dial(b.Context(), dataServer(b, 100, size))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close() })
			sub, err := c.Subscribe(b.Context(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			want := uint64(1)
			defer reportCPU(b)()
			for b.Loop() {
				ev, err := sub.Next(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				if ev.Position != want {
					b.Fatalf("position %d, want %d", ev.Position, want)
				}
				want++
			}
		})
	}
}

// BenchmarkSubscribeEvents: messages delivered to one subscription through
// its Events channel, from DATA frames of 100 messages.
func BenchmarkSubscribeEvents(b *testing.B) {
	for _, size := range []int{16, 128, 1024} {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			c, err := Dial(b.Context(), dataServer(b, 100, size))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close() })
			sub, err := c.Subscribe(b.Context(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			want := uint64(1)
			evs := sub.Events()
			defer reportCPU(b)()
			for b.Loop() {
				ev := <-evs
				if ev.Position != want {
					b.Fatalf("position %d, want %d", ev.Position, want)
				}
				want++
			}
		})
	}
}

// BenchmarkSubscribeFunc: messages delivered to one SubscribeFunc
// callback, from DATA frames of 100 messages: the baseline the queued
// paths (Next, Events) are measured against.
func BenchmarkSubscribeFunc(b *testing.B) {
	for _, size := range []int{16, 128, 1024} {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			c, err := Dial(b.Context(), dataServer(b, 100, size))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close() })
			var n, target atomic.Int64
			target.Store(-1)
			done := make(chan struct{}, 1)
			var bad atomic.Uint64
			want := uint64(1)
			fired := false // reader goroutine only
			_, err = c.SubscribeFunc(b.Context(), "bench", func(ev Event) {
				if ev.Position != want {
					bad.Store(ev.Position)
				}
				want++
				if v := n.Add(1); v >= target.Load() && target.Load() >= 0 && !fired {
					fired = true
					done <- struct{}{}
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			stop := reportCPU(b)
			target.Store(n.Load() + int64(b.N))
			<-done
			b.StopTimer()
			stop()
			if p := bad.Load(); p != 0 {
				b.Fatalf("position %d out of order", p)
			}
		})
	}
}

// reportCPU starts measuring the process's CPU time (user and system, all
// threads: the reader, the consumer and the fake server's writer) and
// returns the function that reports it per operation as cpu-ns/op. On a
// machine shared with other work this moves less than ns/op, which counts
// the time other processes held the cores.
func reportCPU(b *testing.B) func() {
	start := processCPU(b)
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
		}
	}
}
