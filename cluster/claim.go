package cluster

import (
	"sync"

	"github.com/sluice-rtm/sluice/wire"
)

// CLAIM (PROTOCOL.md 9.5): a manager's claim that streamlet id, hosted by
// node host, is a channel's first, replacing a claim of over (0: none);
// the result is the claim the node holds then (host.Host.Claim). The
// manager opens the streamlet only if a majority of the known nodes hold
// its claim (package manager, first.go).

func encClaim(e *wire.NodeEnc, channel string, id uint64, host string, over uint64) {
	e.Str8(channel)
	e.U64(id)
	e.Str8(host)
	e.U64(over)
}

// decClaimHeld decodes a CLAIM result.
func decClaimHeld(b []byte) (uint64, string, error) {
	d := wire.NewNodeDec(wire.TypeNodeResponse, b)
	id, host := d.U64(), d.Str8()
	if d.Err() == nil && (id == 0 || host == "") {
		d.Fail("CLAIM result: streamlet %d on %q", id, host)
	}
	if err := d.Done(); err != nil {
		return 0, "", err
	}
	return id, host, nil
}

// claimHere answers a CLAIM at this node.
func (c *Cluster) claimHere(channel string, id uint64, host string, over uint64) (uint64, string) {
	return c.host.Claim(channel, id, host, over)
}

// claim asks every live node to hold the claim (CLAIM, in parallel on the
// owned pool, this node directly) and reports whether a strict majority of
// the known nodes holds it; otherwise one claim a node holds instead, if
// one refused (manager.Cluster.Claim). A node that does not answer votes
// for nobody. It waits for the network, with no lock held.
func (c *Cluster) claim(channel string, id uint64, host string, over uint64) (bool, uint64, string) {
	c.mu.RLock()
	var nodes []string
	for name := range c.members {
		if _, down := c.down[name]; !down {
			nodes = append(nodes, name)
		}
	}
	known := max(len(c.known), len(c.members))
	c.mu.RUnlock()
	var e wire.NodeEnc
	encClaim(&e, channel, id, host, over)
	var mu sync.Mutex
	var wg sync.WaitGroup
	votes := 0
	var held uint64
	var heldHost string
	for _, n := range nodes {
		wg.Add(1)
		c.owned.Go(func() {
			var hid uint64
			var hh string
			if n == c.self {
				hid, hh = c.claimHere(channel, id, host, over)
			} else {
				b, err := c.call(n, wire.OpClaim, e.B)
				if err == nil {
					hid, hh, err = decClaimHeld(b)
				}
				if err != nil {
					c.log.Warn("sluice cluster: a first streamlet's claim got no answer", "channel", channel, "node", n, "err", err)
					return
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if hid == id {
				votes++
			} else if held == 0 {
				held, heldHost = hid, hh
			}
		}, wg.Done)
	}
	wg.Wait()
	if 2*votes > known {
		return true, 0, ""
	}
	return false, held, heldHost
}
