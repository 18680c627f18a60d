//go:build linux

package ringbuf

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapSupported: off-heap blocks are mapped here (anonymous private
// mappings, pages resident only once written).
const mapSupported = true

// mapBlock maps size bytes of fresh, zeroed, unreserved address space.
func mapBlock(size int) ([]byte, error) {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(size), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), size), nil
}

// releasePages gives b's pages back to the OS: they read as zeros and
// take no memory until written again.
func releasePages(b []byte) {
	_ = unix.Madvise(b, unix.MADV_DONTNEED)
}

// poisonByte fills a free block under the ringbuf_invariants build tag.
const poisonByte = 0xdb

// arenaGuard, under the ringbuf_invariants build tag, makes a block
// inaccessible while it is free (poisoned first, so a guard that failed
// would still show), and accessible again when it is handed out: any
// access to a freed block faults at once. It does nothing otherwise.
func arenaGuard(b []byte, use bool) {
	if !invariants {
		return
	}
	if use {
		if err := unix.Mprotect(b, unix.PROT_READ|unix.PROT_WRITE); err != nil {
			panic("ringbuf: mprotect: " + err.Error())
		}
		return
	}
	for i := range b {
		b[i] = poisonByte
	}
	if err := unix.Mprotect(b, unix.PROT_NONE); err != nil {
		panic("ringbuf: mprotect: " + err.Error())
	}
}
