package owned

import (
	"sync"
	"testing"
)

// TestCountWaited: a goroutine whose done was waited for no longer
// counts; one that was not waited for (blocked) does.
func TestCountWaited(t *testing.T) {
	var c Count
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		c.Go(func() {}, wg.Done)
	}
	wg.Wait()
	if n := c.Running(); n != 0 {
		t.Fatalf("Running = %d after every done was waited for", n)
	}
	release := make(chan struct{})
	ended := make(chan struct{})
	c.Go(func() { <-release }, func() { close(ended) })
	if n := c.Running(); n != 1 {
		t.Fatalf("Running = %d with one goroutine blocked", n)
	}
	close(release)
	<-ended
	if n := c.Running(); n != 0 {
		t.Fatalf("Running = %d after it ended", n)
	}
}
