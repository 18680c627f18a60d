package ringbuf

import (
	"fmt"
	"testing"
)

// TestHeld_RecordsVisibleOnlyWhenCommitted: in held mode appended records
// are written (Written, AppendHeldRun, HeldStamp see them) but readers see
// only what Commit covered; Commit never goes back nor past Written.
func TestHeld_RecordsVisibleOnlyWhenCommitted(t *testing.T) {
	b := New(100, 1<<20)
	b.SetHeld()
	for i := 0; i < 5; i++ {
		if _, err := b.Append([]byte(fmt.Sprint(i)), int64(10+i)); err != nil {
			t.Fatal(err)
		}
	}
	if b.Len() != 0 || b.Written() != 5 || b.Get(0) != nil || b.Stamp(0) != 0 {
		t.Fatalf("before Commit: Len %d Written %d Get(0) %q", b.Len(), b.Written(), b.Get(0))
	}
	if run, end, _ := b.AppendRun(nil, 0, 5, 1<<20); len(run) != 0 || end != 0 {
		t.Fatalf("AppendRun read %d slices up to %d before Commit", len(run), end)
	}
	if run, end, n := b.AppendHeldRun(nil, 1, 5, 1<<20); end != 5 || n != 4*5 || len(run) == 0 || b.HeldStamp(4) != 14 {
		t.Fatalf("AppendHeldRun: end %d, %d bytes, %d slices, stamp %d", end, n, len(run), b.HeldStamp(4))
	}
	b.Commit(3)
	if b.Len() != 3 || string(b.Get(2)) != "2" || b.Get(3) != nil {
		t.Fatalf("after Commit(3): Len %d", b.Len())
	}
	b.Commit(2)  // never back
	b.Commit(99) // never past Written
	if b.Len() != 5 {
		t.Fatalf("Len %d, want 5", b.Len())
	}
}

// TestHeld_TruncateDropsOnlyInvisibleRecords: Truncate keeps the first n
// records and seals; it never drops a visible record.
func TestHeld_TruncateDropsOnlyInvisibleRecords(t *testing.T) {
	b := New(100, 1<<20)
	b.SetHeld()
	for i := 0; i < 6; i++ {
		if _, err := b.Append([]byte("abc"), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	b.Commit(2)
	b.Truncate(1) // below the visible count: refused
	if b.Written() != 6 || b.Len() != 2 {
		t.Fatalf("Truncate(1) under Len 2: Written %d Len %d", b.Written(), b.Len())
	}
	b2 := New(100, 1<<20)
	b2.SetHeld()
	for i := 0; i < 6; i++ {
		_, _ = b2.Append([]byte("abc"), int64(i))
	}
	b2.Commit(2)
	b2.Truncate(4)
	b2.Commit(6) // clamped to what is left
	b2.Seal()
	if b2.Written() != 4 || b2.Len() != 4 || !b2.Sealed() || b2.Bytes() != 4*7 {
		t.Fatalf("after Truncate(4): Written %d Len %d Bytes %d sealed %v", b2.Written(), b2.Len(), b2.Bytes(), b2.Sealed())
	}
}
