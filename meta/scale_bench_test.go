package meta_test

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/metaload"
	"github.com/sluice-rtm/sluice/meta"
)

// BenchmarkState100k: 100,000 channels of six streamlets with two
// replicas (names of 22 bytes), built by their rollovers (metaload).
// Each op takes a snapshot as the log does and restores it into a new
// state: capture-ms is Snapshot (on the applying goroutine: no command
// applies meanwhile), persist-ms its encoding (Persist, to a buffer),
// restore-ms Restore, and eager-ms the old way, the whole encoding on the
// applying goroutine (AppendSnapshot into a fresh buffer). heap-MB is
// what the state holds (live heap after the build, less before),
// restored-heap-MB what a state restored from the snapshot holds,
// snapshot-MB the encoding.
func BenchmarkState100k(b *testing.B) {
	const chans = 100_000
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	s := meta.New()
	l := metaload.New(metaload.Config{Channels: chans, Keep: 6})
	start := time.Now()
	var idx uint64
	for l.Opens() < chans*7 {
		c := l.Next()
		idx++
		if r := s.ApplyCmd(idx, &c); r != meta.ResultOK {
			b.Fatalf("command %d: %v", idx, r)
		}
	}
	build := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	heap := float64(m1.HeapAlloc-m0.HeapAlloc) / 1e6
	var capture, persist, restore, eager time.Duration
	var buf bytes.Buffer
	for b.Loop() {
		t0 := time.Now()
		p := s.Snapshot()
		t1 := time.Now()
		buf.Reset()
		if err := p.Persist(&buf); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		r := meta.New()
		if err := r.Restore(bytes.NewReader(buf.Bytes()), 1<<30); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		_ = s.AppendSnapshot(nil)
		t4 := time.Now()
		capture, persist, restore, eager = capture+t1.Sub(t0), persist+t2.Sub(t1), restore+t3.Sub(t2), eager+t4.Sub(t3)
		if r.Len() != chans {
			b.Fatalf("restored %d channels", r.Len())
		}
	}
	// What a restored state holds (a restarted node's).
	var m2, m3 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m2)
	r := meta.New()
	if err := r.Restore(bytes.NewReader(buf.Bytes()), 1<<30); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&m3)
	b.ReportMetric(float64(m3.HeapAlloc-m2.HeapAlloc)/1e6, "restored-heap-MB")
	runtime.KeepAlive(r)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(capture), "capture-ms")
	b.ReportMetric(ms(persist), "persist-ms")
	b.ReportMetric(ms(restore), "restore-ms")
	b.ReportMetric(ms(eager), "eager-ms")
	b.ReportMetric(heap, "heap-MB")
	b.ReportMetric(float64(buf.Len())/1e6, "snapshot-MB")
	b.Logf("built %d channels (%d commands) in %v", s.Len(), idx, build)
}
