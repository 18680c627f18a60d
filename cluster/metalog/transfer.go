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
// waits for its answer (under op: raft never answers a transfer queued as
// it shuts down).
func (r *Raft) transferTo(id raft.ServerID, addr raft.ServerAddress) error {
	return r.op(func() error { return r.raft.LeadershipTransferToServer(id, addr).Error() })
}
