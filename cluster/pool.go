package cluster

// The cluster's goroutines, all owned by the Cluster and stopped by
// Shutdown (or Halt): the membership refresher (run), the interest worker,
// and two bounded pools of workers: one for the NODE_REQUESTs served for
// peers (goServe), one for the calls this node makes that wait for other
// nodes (Go: the engine's control-plane calls, the manager's closes and
// copies, notices). No goroutine is started per call.
//
// Two pools, so that a node always serves its peers: a gateway's calls
// wait for the leader, whose requests to that gateway's host (SEAL, HOST)
// must not queue behind them. With one pool, 10,000 channels whose leases
// ended together filled the gateways' workers with grants waiting for the
// leader, and the leader's with closes waiting for SEALs queued behind
// those grants: only the request timeouts broke the cycle (40-76
// rollovers/s where 2,500 were due, BenchmarkClusterLeases).

const (
	// poolWorkers bounds, per pool, the calls that wait for the network
	// at once.
	poolWorkers = 64
	// poolQueue bounds, per pool, the calls waiting for a worker; past it
	// Go (goServe) refuses.
	poolQueue = 4096
)

// startPool starts the workers of both pools.
func (c *Cluster) startPool() {
	c.jobs = make(chan func(), poolQueue)
	c.serveJobs = make(chan func(), poolQueue)
	for _, q := range []chan func(){c.jobs, c.serveJobs} {
		for range poolWorkers {
			c.poolWG.Add(1)
			c.owned.Go(func() {
				for {
					select {
					case <-c.stop:
						return
					case fn := <-q:
						fn()
					}
				}
			}, c.poolWG.Done)
		}
	}
}

// goServe runs fn, a NODE_REQUEST served for a peer, on a worker of the
// serving pool; false, without running it, when its queue is full or the
// cluster is shutting down. It never blocks.
func (c *Cluster) goServe(fn func()) bool { return enqueue(c.stop, c.serveJobs, fn) }

// Go runs fn on one of the cluster's pooled goroutines; false, without
// running it, when the queue is full or the cluster is shutting down. It
// never blocks, so the event loops may call it.
func (c *Cluster) Go(fn func()) bool { return enqueue(c.stop, c.jobs, fn) }

// enqueue puts fn in q unless stop is closed or q is full.
func enqueue(stop chan struct{}, q chan func(), fn func()) bool {
	select {
	case <-stop:
		return false
	default:
	}
	select {
	case q <- fn:
		return true
	default:
		return false
	}
}
