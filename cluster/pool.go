package cluster

// The cluster's goroutines, all owned by the Cluster and stopped by
// Shutdown (or Halt): the membership refresher (run), the interest worker,
// and a bounded pool of workers for calls that wait for other nodes (the
// engine's control-plane calls, NODE_REQUESTs served for peers, notices
// to reader nodes). No goroutine is started per call.

const (
	// poolWorkers bounds the calls that wait for the network at once.
	poolWorkers = 64
	// poolQueue bounds the calls waiting for a worker; past it Go refuses.
	poolQueue = 4096
)

// startPool starts the workers.
func (c *Cluster) startPool() {
	c.jobs = make(chan func(), poolQueue)
	for range poolWorkers {
		c.poolWG.Add(1)
		c.owned.Go(func() {
			for {
				select {
				case <-c.stop:
					return
				case fn := <-c.jobs:
					fn()
				}
			}
		}, c.poolWG.Done)
	}
}

// Go runs fn on one of the cluster's pooled goroutines; false, without
// running it, when the queue is full or the cluster is shutting down. It
// never blocks, so the event loops may call it.
func (c *Cluster) Go(fn func()) bool {
	select {
	case <-c.stop:
		return false
	default:
	}
	select {
	case c.jobs <- fn:
		return true
	default:
		return false
	}
}
