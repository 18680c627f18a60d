package cluster

import (
	"sync"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// Interest: which channels this node's gateway reads, registered with the
// leader's manager so that it never drops a channel with readers. A count
// is absolute (this node's reading loops of the channel), so sending it
// again is harmless: the worker sends the channels whose count changed,
// and every count again to each new leader (whose manager starts with
// none, and drops no idle channel for a grace period meanwhile).

// maxInterestBatch bounds the entries of one INTEREST request.
const maxInterestBatch = 512

// interests is this node's registrations; counts and dirty are guarded
// by imu (taken alone).
type interests struct {
	imu    sync.Mutex
	counts map[string]int  // channel -> reading loops here
	dirty  map[string]bool // counts not sent to the current leader yet
	iwake  chan struct{}
}

func (i *interests) init() {
	i.counts = make(map[string]int)
	i.dirty = make(map[string]bool)
	i.iwake = make(chan struct{}, 1)
}

func (i *interests) wake() {
	select {
	case i.iwake <- struct{}{}:
	default:
	}
}

// Interest adds delta reading loops of this node for channel and sends the
// new count to the leader off the caller's goroutine. Any goroutine; it
// never blocks on the network.
func (c *Cluster) Interest(channel string, delta int) {
	c.imu.Lock()
	n := c.counts[channel] + delta
	if n <= 0 {
		delete(c.counts, channel)
	} else {
		c.counts[channel] = n
	}
	c.dirty[channel] = true
	c.imu.Unlock()
	c.interests.wake()
}

// resendInterest marks every count to be sent again (a new leader).
func (c *Cluster) resendInterest() {
	c.imu.Lock()
	for ch := range c.counts {
		c.dirty[ch] = true
	}
	c.imu.Unlock()
	c.interests.wake()
}

// interestWorker sends the changed counts to the leader (one goroutine,
// owned by the Cluster, until it stops); a failed batch is sent again
// after a pause.
func (c *Cluster) interestWorker() {
	for {
		select {
		case <-c.stop:
			return
		case <-c.iwake:
		}
		for {
			batch := c.takeDirty()
			if len(batch) == 0 {
				break
			}
			if err := c.sendInterest(batch); err != nil {
				c.log.Debug("sluice cluster: registering readers with the leader failed; trying again", "err", err)
				c.imu.Lock()
				for _, it := range batch {
					c.dirty[it.ch] = true
				}
				c.imu.Unlock()
				select {
				case <-c.stop:
					return
				case <-time.After(c.raftTimeout()):
				}
			}
		}
	}
}

type interestItem struct {
	ch string
	n  int
}

// takeDirty removes up to maxInterestBatch dirty counts and returns them.
func (c *Cluster) takeDirty() []interestItem {
	c.imu.Lock()
	defer c.imu.Unlock()
	var out []interestItem
	for ch := range c.dirty {
		if len(out) == maxInterestBatch {
			break
		}
		delete(c.dirty, ch)
		out = append(out, interestItem{ch, c.counts[ch]})
	}
	return out
}

// sendInterest registers the counts of batch with the leader (INTEREST:
// u16 n, n x (str8 channel, u32 loops)).
func (c *Cluster) sendInterest(batch []interestItem) error {
	var e wire.NodeEnc
	e.U16(uint16(len(batch)))
	for _, it := range batch {
		e.Str8(it.ch)
		e.U32(uint32(it.n))
	}
	_, err := c.leaderCall(wire.OpInterest, e.B, func() ([]byte, error) {
		for _, it := range batch {
			c.mgr.SetInterest(it.ch, c.self, it.n)
		}
		return nil, nil
	})
	return err
}
