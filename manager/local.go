package manager

import (
	"fmt"

	"github.com/sluice-rtm/sluice/role"
)

// Local returns the Cluster of a single node: node's own host is the only
// one, it hosts every streamlet, every other node is gone, and work runs
// inline (nothing waits for a network).
func Local(node string, host role.Host) Cluster { return local{node: node, host: host} }

type local struct {
	node string
	host role.Host
}

func (l local) HostOf(node string) role.Host {
	if node == l.node {
		return l.host
	}
	return nil
}

func (l local) Choose(string, uint64, Load, []string) (string, bool) { return l.node, true }
func (l local) Usable(node string) bool                              { return node == l.node }
func (l local) Gone(node string) bool                                { return node != l.node }
func (l local) Go(f func()) bool                                     { f(); return true }

func (l local) Copy(to, channel string, _ uint64, ref role.StreamletRef) error {
	return fmt.Errorf("manager: a single node makes no copies (streamlet %d of %q to %s)", ref.ID, channel, to)
}
