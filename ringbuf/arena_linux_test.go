//go:build linux

package ringbuf

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// residentPages returns how many of b's pages are resident (mincore).
func residentPages(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+arenaPage-1)/arenaPage)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		uintptr(unsafe.Pointer(unsafe.SliceData(vec)))); errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// The arena maps history off the heap on Linux only (arena_linux.go); elsewhere
// these tests have nothing to test and are not built.

// TestArenaReusesResidentBlocksFirst: a freed block is handed out again
// before new address space, and before a block whose pages were returned.
func TestArenaReusesResidentBlocksFirst(t *testing.T) {
	const size = 3 * arenaPage // a size no chunk class uses: the lists are this test's
	a, offA := arenaAlloc(size)
	b, offB := arenaAlloc(size)
	if !offA || !offB {
		t.Fatal("blocks on the heap")
	}
	arenaFreeBlock(b)
	arenaFreeBlock(a)
	Trim(0, 0) // both returned: cold
	c, _ := arenaAlloc(size)
	arenaFreeBlock(c) // resident again
	d, _ := arenaAlloc(size)
	if unsafe.SliceData(d) != unsafe.SliceData(c) {
		t.Fatal("a resident free block was not the first handed out")
	}
	e, _ := arenaAlloc(size)
	if p := unsafe.SliceData(e); p != unsafe.SliceData(a) && p != unsafe.SliceData(b) {
		t.Fatal("new address space mapped while a returned block was free")
	}
	arenaFreeBlock(d)
	arenaFreeBlock(e)
	Trim(0, 0)
}

// TestArenaTrimReturnsPages: Trim gives the pages of free blocks back to
// the OS (mincore: not resident) down to keep bytes, at most max bytes per
// call; in-use blocks keep theirs.
func TestArenaTrimReturnsPages(t *testing.T) {
	const size = 5 * arenaPage
	var blocks [][]byte
	for range 8 {
		b, _ := arenaAlloc(size)
		for i := range b {
			b[i] = 1
		}
		blocks = append(blocks, b)
	}
	Trim(0, 0)
	_, free0, _, _ := OffHeap()
	for _, b := range blocks[:6] {
		arenaFreeBlock(b)
	}
	if _, free, _, _ := OffHeap(); free-free0 != 6*size {
		t.Fatalf("free %d after freeing 6 blocks of %d", free-free0, size)
	}
	if got := Trim(free0+2*size, 3*size); got != 3*size {
		t.Fatalf("Trim returned %d with a bound of %d", got, 3*size)
	}
	if got := Trim(free0+2*size, 0); got != size {
		t.Fatalf("Trim returned %d, want the rest above keep: %d", got, size)
	}
	resident := 0
	for _, b := range blocks[:6] {
		resident += residentPages(t, b)
	}
	if resident != 2*5 {
		t.Fatalf("%d pages of the 6 free blocks resident, want the 10 kept", resident)
	}
	for _, b := range blocks[6:] {
		if n := residentPages(t, b); n != 5 {
			t.Fatalf("an in-use block has %d of 5 pages resident", n)
		}
	}
	for _, b := range blocks[6:] {
		arenaFreeBlock(b)
	}
	Trim(0, 0)
}
