package fuzz

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// heapSlack bounds how much the heap in use (HeapInuse, after GCs if
// needed) may grow over its level before the first input of the process:
// the shared server with its small limits and the harness use one or two
// MiB, and inputs are at most maxBytes with channels expiring after ttl,
// so a server that keeps its memory bounded stays far below it.
const heapSlack = 64 << 20

// fuzzEngineHeap is added to the bound in a fuzzing worker: once it starts
// mutating, Go's fuzzing engine holds a scratch buffer as large as its
// shared memory (100 MiB, divided among the target's arguments).
const fuzzEngineHeap = 100 << 20

var (
	heapOnce  sync.Once
	heapBase  uint64
	heapBound uint64
)

var probeSeq atomic.Uint64

// probe checks that the server still serves a fresh, well-behaved client:
// on a new connection it subscribes to a channel nobody else uses,
// publishes one message with ACK, and must receive WELCOME, SUBSCRIBED,
// the PUBACK and the message itself at the acknowledged position, within
// syncTimeout.
func probe(addr string) error {
	nc, err := net.DialTimeout("tcp", addr, syncTimeout)
	if err != nil {
		return fmt.Errorf("probe: dial: %w", err)
	}
	defer abort(nc)
	return probeConn(nc)
}

// probeConn is probe's session over an open connection.
func probeConn(nc net.Conn) error {
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(syncTimeout))
	n := probeSeq.Add(1)
	ch := fmt.Sprintf("probe.%d.%d", rand.Uint32(), n)
	payload := []byte(fmt.Sprintf("probe message %d", n))
	b := wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "probe"})
	b = wire.AppendSubscribe(b, 2, wire.Subscribe{SubID: 1, Start: wire.StartLive, Channel: []byte(ch)})
	b = wire.AppendPublish(b, 3, wire.FlagAck, ch, payload)
	if _, err := nc.Write(b); err != nil {
		return fmt.Errorf("probe: write: %w", err)
	}
	r := wire.NewReader(nc, wire.MinMaxBody)
	var welcome, subscribed bool
	var ackPos, dataPos uint64
	for !welcome || !subscribed || ackPos == 0 || dataPos == 0 {
		h, body, err := r.Next()
		if err != nil {
			return fmt.Errorf("probe: read (welcome %v, subscribed %v, ack %d, data %d): %w",
				welcome, subscribed, ackPos, dataPos, err)
		}
		switch h.Type {
		case wire.TypeWelcome:
			welcome = true
		case wire.TypeSubscribed:
			subscribed = true
		case wire.TypePubAck:
			acks, err := wire.DecodePubAck(body, nil)
			if err != nil || len(acks) != 1 || acks[0].ID != 3 {
				return fmt.Errorf("probe: PUBACK %v, %v", acks, err)
			}
			ackPos = acks[0].Position
		case wire.TypeData:
			first, count, recs, err := wire.DecodeData(body)
			if err != nil || count != 1 || h.ID != 1 {
				return fmt.Errorf("probe: DATA sub %d count %d: %v", h.ID, count, err)
			}
			p, _, _ := wire.NextRecord(recs)
			if !bytes.Equal(p, payload) {
				return fmt.Errorf("probe: DATA %q, want %q", p, payload)
			}
			dataPos = first
		default:
			return fmt.Errorf("probe: unexpected %v %q", h.Type, body)
		}
	}
	if ackPos != dataPos {
		return fmt.Errorf("probe: PUBACK position %d, DATA position %d", ackPos, dataPos)
	}
	return nil
}

// settle waits until the number of goroutines is at most limit, polling,
// and fails with the goroutine stacks when it does not get there within
// syncTimeout. The engine runs a fixed set of goroutines (event loops, a
// ticker), so anything above the count before an input is a leak, once
// short-lived timers have fired.
func settle(limit int) error {
	deadline := time.Now().Add(syncTimeout)
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 20*time.Millisecond) {
		n := runtime.NumGoroutine()
		if n <= limit {
			return nil
		}
		if time.Now().After(deadline) {
			var sb strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&sb, 1)
			return fmt.Errorf("%d goroutines, %d before the input:\n%s", n, limit, sb.String())
		}
		time.Sleep(wait)
	}
}

// heapBaseline records the heap's base level, once per process: call it
// before the first input (the fuzzing engine has allocated its own memory
// by then).
func heapBaseline() {
	heapOnce.Do(func() {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		heapBase = ms.HeapInuse
		heapBound = heapBase + heapSlack
		if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
			heapBound += fuzzEngineHeap
		}
	})
}

// heapCheck fails when the heap in use stays more than heapSlack over the
// base level, after two GCs (sync.Pool keeps its objects through one).
func heapCheck() error {
	heapBaseline()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	for gcs := 0; ms.HeapInuse > heapBound; gcs++ {
		if gcs == 2 {
			return fmt.Errorf("heap in use %d MiB after GC, %d MiB at the start, bound %d MiB",
				ms.HeapInuse>>20, heapBase>>20, heapBound>>20)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
	}
	return nil
}

// checkInput runs one input and every after-input property.
func checkInput(addr string, data []byte) error {
	heapBaseline()
	before := runtime.NumGoroutine()
	_, err := runInput(addr, data)
	return errors.Join(err, probe(addr), settle(before), heapCheck())
}

// FuzzServer drives the live server with a fuzzer-chosen sequence of
// actions (see driver_test.go) on up to two concurrent connections at a
// time. Properties, after every input:
//   - every connection was treated as PROTOCOL.md requires: kept open (a
//     PING after the last frame is answered) or closed with an allowed
//     fatal ERROR, as the independent model predicts;
//   - every frame the server sent decodes, is of a server-to-client type,
//     and DATA/GAP are contiguous per subscription (outCheck);
//   - a fresh probe client still publishes and receives its own message;
//   - no goroutine outlives the input;
//   - the heap grows by less than heapSlack (plus the fuzzing engine's
//     own scratch memory when fuzzing).
func FuzzServer(f *testing.F) {
	addr := server(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := checkInput(addr, data); err != nil {
			t.Fatal(err)
		}
	})
}

// maxStream bounds the bytes one FuzzServerBytes input writes.
const maxStream = 64 << 10

// runStream writes a valid HELLO (unless the first cut byte is odd) and
// then stream, raw, in pieces of 1..64 bytes chosen by cuts (cycled), and
// judges the connection with the protocol model.
func runStream(addr string, stream, cuts []byte) error {
	fc, err := dialF(addr)
	if err != nil {
		return err
	}
	if len(cuts) == 0 || cuts[0]&1 == 0 {
		fc.write(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "stream"}))
	}
	stream = stream[:min(len(stream), maxStream)]
	for i := 0; len(stream) > 0 && !fc.wdead; i++ {
		k := len(stream)
		if len(cuts) > 0 {
			k = min(k, 1+int(cuts[i%len(cuts)])%64)
		}
		fc.write(stream[:k])
		stream = stream[k:]
	}
	return fc.finish()
}

// FuzzServerBytes writes fuzzer bytes raw on one connection, after a
// valid HELLO, in fuzzer-chosen pieces, so that frames and headers are
// split across reads at every possible offset. Properties: those of
// FuzzServer (the connection ends as the protocol model predicts, the
// server's output is well-formed, a probe still works, no goroutine
// leaks, bounded heap).
func FuzzServerBytes(f *testing.F) {
	addr := server(f)
	f.Fuzz(func(t *testing.T, stream, cuts []byte) {
		heapBaseline()
		before := runtime.NumGoroutine()
		err := runStream(addr, stream, cuts)
		if err = errors.Join(err, probe(addr), settle(before), heapCheck()); err != nil {
			t.Fatal(err)
		}
	})
}
