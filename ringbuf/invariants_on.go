//go:build ringbuf_invariants

package ringbuf

// invariants enables the writer-side checks of invariants.go
// (go test -tags ringbuf_invariants).
const invariants = true
