package metalog

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// TransferLeadership hands this node's leadership to node's server, which
// must be a voter of the configuration; only the leader may. It returns
// once raft has begun the transfer (the new leader's election follows).
func (r *Raft) TransferLeadership(node string) error {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("metalog: reading the configuration: %w", err)
	}
	for _, s := range f.Configuration().Servers {
		if nodeOf(string(s.ID)) == node && s.Suffrage == raft.Voter {
			if err := r.transferTo(s.ID, s.Address); err != nil {
				return r.mapErr(err)
			}
			return nil
		}
	}
	return fmt.Errorf("metalog: %s is not a voter", node)
}

// transferTo asks raft to hand this node's leadership to server id and
// waits for its answer. raft queues the request in a buffered channel that
// its main loop stops reading when it shuts down, so a request queued as
// raft shuts down is never answered (hashicorp/raft v1.8.0: a test's
// transfer to a node killed meanwhile waited 23 minutes). Requests are
// therefore queued and awaited only under xfer's read lock, which Shutdown
// takes before it stops raft: while one waits, raft's loop runs and answers
// it, within an election timeout when this node leads (raft's transfer
// timer), at once when it does not.
func (r *Raft) transferTo(id raft.ServerID, addr raft.ServerAddress) error {
	r.xfer.RLock()
	defer r.xfer.RUnlock()
	if r.xferDown {
		return ErrShutdown
	}
	return r.raft.LeadershipTransferToServer(id, addr).Error()
}
