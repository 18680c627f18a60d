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
			if err := r.raft.LeadershipTransferToServer(s.ID, s.Address).Error(); err != nil {
				return r.mapErr(err)
			}
			return nil
		}
	}
	return fmt.Errorf("metalog: %s is not a voter", node)
}
