package ringbuf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// Benchmark limits: the BRIEF's defaults for a streamlet. When a buffer is
// full the benchmark rolls over to a new one, as the engine does, so the
// cost of New/Free (and the baseline's reallocation) is included.
const (
	benchMaxRecords = 5000
	benchMaxBytes   = 2 << 20
)

// recordLog is the interface both implementations offer to the benchmarks.
type recordLog interface {
	Append(p []byte, stamp int64) (int, error)
	Len() int
	Get(i int) []byte
	AppendRun(dst [][]byte, from, to, maxBytes int) ([][]byte, int, int)
	Acquire() bool
	Release()
	Free()
}

// mutexLog is the baseline: the same records in one growing []byte plus an
// offsets slice, guarded by a sync.RWMutex (readers share the read lock).
// Memory is left to the GC, so slices stay valid without reference counts.
type mutexLog struct {
	mu         sync.RWMutex
	data       []byte
	offs       []int
	stamps     []int64
	maxRecords int
	maxBytes   int
	sealed     bool
}

func newMutexLog(maxRecords, maxBytes int) *mutexLog {
	return &mutexLog{maxRecords: maxRecords, maxBytes: maxBytes}
}

// newMutexLogPrealloc returns a baseline whose slices are allocated at their
// limits up front, isolating the cost of the lock from that of growth.
func newMutexLogPrealloc(maxRecords, maxBytes int) *mutexLog {
	return &mutexLog{
		maxRecords: maxRecords, maxBytes: maxBytes,
		data:   make([]byte, 0, maxBytes),
		offs:   make([]int, 0, maxRecords),
		stamps: make([]int64, 0, maxRecords),
	}
}

func (m *mutexLog) Append(p []byte, stamp int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sealed {
		return -1, ErrSealed
	}
	if len(m.offs) >= m.maxRecords || len(m.data)+4+len(p) > m.maxBytes {
		return -1, ErrFull
	}
	m.offs = append(m.offs, len(m.data))
	m.stamps = append(m.stamps, stamp)
	m.data = binary.BigEndian.AppendUint32(m.data, uint32(len(p)))
	m.data = append(m.data, p...)
	return len(m.offs) - 1, nil
}

func (m *mutexLog) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.offs)
}

func (m *mutexLog) Get(i int) []byte {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if i < 0 || i >= len(m.offs) {
		return nil
	}
	off := m.offs[i]
	l := int(binary.BigEndian.Uint32(m.data[off:]))
	return m.data[off+4 : off+4+l : off+4+l]
}

func (m *mutexLog) AppendRun(dst [][]byte, from, to, maxBytes int) ([][]byte, int, int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	to = min(to, len(m.offs))
	if from < 0 || from >= to {
		return dst, from, 0
	}
	end := from + 1
	endOff := func(i int) int {
		if i < len(m.offs) {
			return m.offs[i]
		}
		return len(m.data)
	}
	for end < to && endOff(end+1)-m.offs[from] <= maxBytes {
		end++
	}
	s, e := m.offs[from], endOff(end)
	return append(dst, m.data[s:e:e]), end, e - s
}

func (m *mutexLog) Acquire() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return !m.sealed
}

func (m *mutexLog) Release() {}

func (m *mutexLog) Free() {
	m.mu.Lock()
	m.sealed = true
	m.mu.Unlock()
}

type impl struct {
	name string
	mk   func() recordLog
}

var impls = []impl{
	{"ringbuf", func() recordLog { return New(benchMaxRecords, benchMaxBytes) }},
	{"mutex", func() recordLog { return newMutexLog(benchMaxRecords, benchMaxBytes) }},
	{"mutexprealloc", func() recordLog { return newMutexLogPrealloc(benchMaxRecords, benchMaxBytes) }},
}

// BenchmarkAppend measures the writer alone, rolling over to a fresh buffer
// when one is full.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{16, 128, 1024} {
		for _, im := range impls {
			b.Run(fmt.Sprintf("size=%d/%s", size, im.name), func(b *testing.B) {
				p := make([]byte, size)
				buf := im.mk()
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					if _, err := buf.Append(p, int64(i)); err != nil {
						buf.Free()
						buf = im.mk()
						if _, err := buf.Append(p, int64(i)); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				buf.Free()
			})
		}
	}
}

// BenchmarkReadWhileAppending runs R reader goroutines that read records
// (Get) of the current buffer while one writer appends 128-byte records and
// rolls buffers over. One op is one record read; the b.N reads are split
// among the readers. The writer is paced to 1 append per 16 reads (reported
// as appends/op) so that both implementations run the same mix even though
// readers and writer share 2 cores. A reader holds a reference for 256 reads
// at a time, as an engine reader holds one per batch.
func BenchmarkReadWhileAppending(b *testing.B) {
	benchReaders(b, 128, 1, 16, func(l recordLog, n, pos int, _ *[][]byte) int {
		return len(l.Get(pos % n))
	})
}

// BenchmarkRunWhileAppending is like BenchmarkReadWhileAppending, but each
// op is an AppendRun of up to 16 KiB ending at the live edge (the engine's
// fan-out read, about 124 records), the writer is paced to 8 appends per op,
// and SetBytes counts the 16 KiB.
func BenchmarkRunWhileAppending(b *testing.B) {
	benchReaders(b, 16<<10, 8, 1, func(l recordLog, n, pos int, dst *[][]byte) int {
		var nb int
		*dst, _, nb = l.AppendRun((*dst)[:0], max(0, n-128), n, 16<<10)
		return nb
	})
}

// benchReaders runs the reader sweep. The writer appends num records per den
// reader ops and readers wait (runtime.Gosched) when they are more than
// slack appends ahead, so ns/op is the wall time of a fixed read/append mix.
func benchReaders(b *testing.B, setBytes int64, num, den int64, read func(l recordLog, n, pos int, dst *[][]byte) int) {
	const slack = 1024
	for _, readers := range []int{1, 8, 64} {
		for _, im := range impls {
			b.Run(fmt.Sprintf("readers=%d/%s", readers, im.name), func(b *testing.B) {
				var cur atomic.Pointer[recordLog]
				first := im.mk()
				payload := make([]byte, 128)
				for i := range 1000 {
					if _, err := first.Append(payload, int64(i)); err != nil {
						b.Fatal(err)
					}
				}
				cur.Store(&first)
				var stop atomic.Bool
				var ops, appends atomic.Int64
				writerDone := make(chan struct{})
				go func() {
					defer close(writerDone)
					buf := first
					k := int64(0)
					for !stop.Load() {
						if k*den >= ops.Load()*num {
							runtime.Gosched()
							continue
						}
						if _, err := buf.Append(payload, k); err != nil {
							next := im.mk()
							if _, err := next.Append(payload, k); err != nil {
								panic(err)
							}
							cur.Store(&next)
							buf.Free()
							buf = next
						}
						k++
						appends.Store(k)
					}
				}()
				b.SetBytes(setBytes)
				b.ReportAllocs()
				var wg sync.WaitGroup
				var sink atomic.Int64
				b.ResetTimer()
				for r := range readers {
					quota := b.N / readers
					if r < b.N%readers {
						quota++
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						dst := make([][]byte, 0, 16)
						sum, pos := 0, r*7919
						for done := 0; done < quota; {
							// Pace: stay within slack ops of the writer.
							if ops.Load()*num > (appends.Load()+slack)*den {
								runtime.Gosched()
								continue
							}
							l := *cur.Load()
							if !l.Acquire() {
								continue
							}
							k := 0
							for ; k < 256 && done < quota; k++ {
								n := l.Len()
								sum += read(l, n, pos, &dst)
								pos++
								done++
							}
							l.Release()
							ops.Add(int64(k))
						}
						sink.Add(int64(sum))
					}()
				}
				wg.Wait()
				b.StopTimer()
				stop.Store(true)
				<-writerDone
				b.ReportMetric(float64(appends.Load())/float64(b.N), "appends/op")
				(*cur.Load()).Free()
			})
		}
	}
}

// TestBaselineMatchesBuffer keeps the benchmark honest: the mutex baseline
// returns the same records and runs as Buffer for the same appends.
func TestBaselineMatchesBuffer(t *testing.T) {
	for _, im := range impls[1:] {
		base, buf := im.mk(), New(benchMaxRecords, benchMaxBytes)
		r := newRand(7)
		for i := range 3000 {
			p := pattern(int(r.next() % 2000))
			_, e1 := base.Append(p, int64(i))
			_, e2 := buf.Append(p, int64(i))
			if !errors.Is(e1, e2) {
				t.Fatalf("%s: Append %d: %v vs %v", im.name, i, e1, e2)
			}
		}
		if base.Len() != buf.Len() {
			t.Fatalf("%s: Len %d vs %d", im.name, base.Len(), buf.Len())
		}
		for i := range buf.Len() {
			if !bytes.Equal(base.Get(i), buf.Get(i)) {
				t.Fatalf("%s: Get(%d) differs", im.name, i)
			}
		}
		for k := range 200 {
			from, maxBytes := int(r.next()%uint64(buf.Len())), int(r.next()%(40<<10))
			r1, end1, n1 := base.AppendRun(nil, from, buf.Len(), maxBytes)
			r2, end2, n2 := buf.AppendRun(nil, from, buf.Len(), maxBytes)
			if end1 != end2 || n1 != n2 || !bytes.Equal(bytes.Join(r1, nil), bytes.Join(r2, nil)) {
				t.Fatalf("%s: run %d from %d max %d: end %d/%d nbytes %d/%d", im.name, k, from, maxBytes, end1, end2, n1, n2)
			}
		}
		base.Free()
		buf.Free()
	}
}
