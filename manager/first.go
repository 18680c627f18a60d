package manager

import (
	"errors"
	"fmt"

	"github.com/sluice-rtm/sluice/role"
)

// A channel's first streamlet (its list is empty: a new channel, a new
// incarnation, or one whose streamlets all expired) has no predecessor on
// which a successor record would fence a second manager (openNext). Two
// managers whose views of the channel disagree (a flap made both lose
// their quorum, forget the channel and rebuild it from nothing) would
// each open one, and both would take writes: positions out of order, a
// reader told of a gap that never existed. So in a cluster a first
// streamlet is opened only once a majority of the nodes hold its claim
// (Cluster.Claim, host.Host.Claim): majorities intersect, so at most one
// of two competing claims wins. The loser looks at the claim it met
// (decideClaim): a streamlet hosted already is the other manager's first,
// and the channel is rebuilt with it (ErrSuccessorTaken); one hosted
// nowhere is barred at the node chosen for it (a SEAL of an id a host
// does not hold, host.Host.Seal), so its manager can never open it, and
// the claim is taken over it after the rebuild found the channel still
// empty.

// claimStep is what a manager does after a claim of a first streamlet.
type claimStep uint8

const (
	claimWon     claimStep = iota + 1 // open the streamlet
	claimNoVote                       // too few nodes answered: no grant now
	claimRebuild                      // another first streamlet is hosted: rebuild with it
	claimBarred                       // the other claim's streamlet is barred: rebuild, then claim over it
	claimUnsure                       // the other claim's node could not be asked: no grant now
)

// claimCheck is what a manager learnt of the streamlet of a claim that
// beat its own, at that streamlet's node.
type claimCheck struct {
	reached bool // the node answered LEN
	hosted  bool // it hosts the streamlet
	sealErr error
	sealed  bool // SEAL was asked (only when not hosted)
}

// decideClaim is the pure decision after a claim (first.go's header):
// won, or the step for the claim held instead (held 0: nobody refused).
func decideClaim(won bool, held uint64, c claimCheck) claimStep {
	switch {
	case won:
		return claimWon
	case held == 0:
		return claimNoVote
	case !c.reached:
		return claimUnsure
	case c.hosted:
		return claimRebuild
	case !c.sealed:
		return claimUnsure
	case c.sealErr == nil:
		return claimRebuild // hosted between LEN and SEAL: sealed now, continued after
	case errors.Is(c.sealErr, role.ErrUnknownStreamlet):
		return claimBarred
	}
	return claimUnsure
}

// claimFirst claims streamlet id on node host as channel's first (mc is
// opening, mc.mu not held). nil: the claim won, and id is kept for a
// retry of this opening (chanState.claim). An error matching
// role.ErrSuccessorTaken makes openGrant rebuild the channel and try
// again; any other refuses this grant (the writer asks again).
func (m *Manager) claimFirst(mc *mchan, channel string, id uint64, host string) error {
	mc.lock()
	over := mc.st.claimOver
	mc.mu.Unlock()
	won, held, heldHost := m.cl.Claim(channel, id, host, over)
	var c claimCheck
	if !won && held != 0 {
		if h := m.hostOf(heldHost); h != nil {
			_, c.hosted = h.Len(held)
			c.reached = true
			if !c.hosted {
				_, c.sealErr = h.Seal(held, 0, "")
				c.sealed = true
			}
		}
	}
	switch decideClaim(won, held, c) {
	case claimWon:
		mc.lock()
		mc.st.claim(0, id)
		mc.st.claimOver = 0
		mc.mu.Unlock()
		return nil
	case claimRebuild:
		return fmt.Errorf("%w: another manager opened %q's first streamlet %d on %s", role.ErrSuccessorTaken, channel, held, heldHost)
	case claimBarred:
		mc.lock()
		mc.st.claimOver = held
		mc.mu.Unlock()
		if m.cfg.Log != nil {
			m.cfg.Log.Warn("sluice cluster: barred another manager's claimed first streamlet", "channel", channel, "streamlet", held, "node", heldHost)
		}
		return fmt.Errorf("%w: %q's first streamlet %d, claimed by another manager, is barred on %s", role.ErrSuccessorTaken, channel, held, heldHost)
	case claimNoVote:
		return fmt.Errorf("%w: no majority took the claim of %q's first streamlet", ErrNoQuorum, channel)
	}
	return fmt.Errorf("%w: %q's first streamlet is claimed by another manager (streamlet %d on %s, not reachable)", ErrNoQuorum, channel, held, heldHost)
}
