//go:build !ringbuf_invariants

package ringbuf

// invariants is off in normal builds; the checks compile away.
const invariants = false
