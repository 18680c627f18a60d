package mapshrink

import (
	"reflect"
	"testing"
)

// TestDeleteCopiesAtAQuarter: a map that grew to 4,096 entries is copied
// into fresh memory when deletes leave 1,024, keeping every entry; smaller
// maps are never copied.
func TestDeleteCopiesAtAQuarter(t *testing.T) {
	m := map[int]int{}
	for i := range 4096 {
		m[i] = i * 2
	}
	var p Peak
	orig := reflect.ValueOf(m).UnsafePointer()
	for i := range 3071 {
		m = Delete(m, i, &p)
	}
	if reflect.ValueOf(m).UnsafePointer() != orig {
		t.Fatal("copied before shrinking to a quarter")
	}
	m = Delete(m, 3071, &p) // 1,024 left: a quarter
	if reflect.ValueOf(m).UnsafePointer() == orig {
		t.Fatal("not copied at a quarter of its peak")
	}
	if len(m) != 1024 || p.n != 1024 {
		t.Fatalf("len %d, peak %d after the copy", len(m), p.n)
	}
	for i := 3072; i < 4096; i++ {
		if m[i] != i*2 {
			t.Fatalf("entry %d lost in the copy", i)
		}
	}
	small := map[int]int{1: 1, 2: 2}
	var q Peak
	before := reflect.ValueOf(small).UnsafePointer()
	if small = Delete(small, 1, &q); reflect.ValueOf(small).UnsafePointer() != before {
		t.Fatal("a map under MinPeak was copied")
	}
}

// TestShrinkAfterSeen: deletes made in a loop (Seen first) and one Shrink
// at the end.
func TestShrinkAfterSeen(t *testing.T) {
	m := map[string]bool{}
	for i := range 2000 {
		m[string(rune(i+64))] = true
	}
	var p Peak
	p.Seen(len(m))
	for k := range m {
		if len(m) <= 100 {
			break
		}
		delete(m, k)
	}
	orig := reflect.ValueOf(m).UnsafePointer()
	if m = Shrink(m, &p); reflect.ValueOf(m).UnsafePointer() == orig || len(m) != 100 {
		t.Fatalf("Shrink kept the old map (len %d)", len(m))
	}
}
