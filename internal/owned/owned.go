// Package owned counts the goroutines a component starts, so that a test
// can check, at the very moment the component's Shutdown returned and with
// no grace period, that none of them still runs: a goroutine its owner
// forgot to wait for is caught even when it would end a moment later
// (goleak's retries would let it pass).
package owned

import "sync/atomic"

// Count counts the goroutines started with Go that have not returned yet.
// The zero value is ready; safe for concurrent use.
type Count struct{ n atomic.Int64 }

// Go runs fn on a new goroutine. The goroutine counts as running until fn
// returned; then, and only then, done (when not nil) tells its owner
// that it ended (a WaitGroup's Done, a channel's close). So once the owner
// has waited for done's signal, Running no longer counts it. fn must not
// signal the owner itself.
func (c *Count) Go(fn func(), done func()) {
	c.n.Add(1)
	go func() {
		fn()
		c.n.Add(-1)
		if done != nil {
			done()
		}
	}()
}

// Running returns the goroutines started with Go whose fn has not
// returned.
func (c *Count) Running() int { return int(c.n.Load()) }
