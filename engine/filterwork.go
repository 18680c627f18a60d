package engine

import (
	"runtime"
	"sync"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/internal/filter"
)

// filterJob is one batch a group needs evaluated: the records of st at
// positions from first (st acquired for the job), and what to call once
// the results are in the filter's cache.
type filterJob struct {
	sf           *sharedFilter
	epoch, first uint64
	run          [][]byte
	st           *host.Streamlet
	done         func()
}

// filterWorkers evaluate filters off the event loops (filter.go). Each
// filter belongs to one worker, so a message is never evaluated twice.
// The queues exist from the server's construction (a SUBSCRIBE may come
// as soon as the loops run); the workers are goroutines owned by the
// server, started with its ticker and stopped when the ticker stops.
type filterWorkers struct {
	jobs []chan filterJob
	next int // round robin for new filters; under mu
	mu   sync.Mutex
	stop chan struct{}
	wg   sync.WaitGroup
}

// newFilterWorkers makes the queues of half as many workers as the
// process may run threads (at least one): a group has at most one job
// out, so a queue of maxFilters x loops / workers never fills.
func newFilterWorkers(maxFilters, loops int) *filterWorkers {
	n := max(1, runtime.GOMAXPROCS(0)/2)
	per := max(16, maxFilters*loops/n+16)
	fw := &filterWorkers{stop: make(chan struct{})}
	for range n {
		fw.jobs = append(fw.jobs, make(chan filterJob, per))
	}
	return fw
}

// start starts the workers.
func (fw *filterWorkers) start(s *Server) {
	for _, ch := range fw.jobs {
		fw.wg.Add(1)
		s.owned.Go(func() { s.filterWorker(ch, fw.stop) }, fw.wg.Done)
	}
}

// assign picks the worker of a new filter.
func (fw *filterWorkers) assign() int {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	w := fw.next
	fw.next = (fw.next + 1) % len(fw.jobs)
	return w
}

// submit queues job for its filter's worker; false when the queue is
// full or the workers stopped (the caller then drops the job).
func (fw *filterWorkers) submit(job filterJob) bool {
	select {
	case <-fw.stop:
		return false
	default:
	}
	select {
	case fw.jobs[job.sf.worker] <- job:
		return true
	default:
		return false
	}
}

// stopAll stops the workers and waits for them; jobs still queued are
// dropped (their streamlets released).
func (fw *filterWorkers) stopAll() {
	close(fw.stop)
	fw.wg.Wait()
	for _, ch := range fw.jobs {
		for {
			select {
			case j := <-ch:
				j.st.Buf().Release()
				continue
			default:
			}
			break
		}
	}
}

// filterWorker evaluates jobs, keeping its share of a CPU at most
// Options.FilterCPU: after a job that took d it rests d*(1-share)/share,
// so that filters, however costly, leave the event loops their CPU (the
// filtered subscribers lag instead; BENCHMARKS.md, "Filters").
func (s *Server) filterWorker(jobs <-chan filterJob, stop <-chan struct{}) {
	var m filter.Message
	share := s.opts.FilterCPU
	rest := time.NewTimer(time.Hour)
	rest.Stop()
	for {
		select {
		case j := <-jobs:
			t0 := time.Now()
			j.sf.evalRun(s, j.epoch, j.first, j.run, &m)
			j.st.Buf().Release()
			j.done()
			if share < 1 {
				rest.Reset(time.Duration(float64(time.Since(t0)) * (1 - share) / share))
				select {
				case <-rest.C:
				case <-stop:
					return
				}
			}
		case <-stop:
			return
		}
	}
}
