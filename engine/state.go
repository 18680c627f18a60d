package engine

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/sluice-rtm/sluice/cluster/metalog"
	"github.com/sluice-rtm/sluice/meta"
)

// The committed streamlet lists (package meta) and what follows from a
// change of them on this node: the host frees and seals its replicas
// (host.Host.Apply), the manager learns what became due, and the
// gateway's readers of the channel look again. Every node applies every
// change alike, on the log's applying goroutine (a single node: the
// proposer's), so none of these blocks.

// applied is the state machine's observer. A single node's readers need
// no wake-up for a change of a list: every change they wait for comes
// with a publish, which wakes them (and their lookups are never cached);
// a cluster's readers cache the lists per loop view (gwChan.gen) and may
// wait for a streamlet another node opened.
func (s *Server) applied(c meta.Change) {
	if freed := s.host.Apply(c); len(freed) > 0 {
		s.log.Debug("sluice cluster: freed streamlets the committed lists no longer hold here", "channel", c.Channel, "streamlets", freed)
	}
	s.mgr.Changed(c)
	if s.opts.Cluster != nil {
		s.gw.changed(c.Channel)
	}
}

// dropGrace is how long a new leader waits before it drops idle channels:
// the reader nodes send it their interest first (cluster/interest.go).
const dropGrace = 30 * time.Second

// instanceID names this process's host incarnation (hosts keep streamlets
// in memory: a restarted node holds nothing its earlier one held).
func instanceID() string {
	var b [8]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		panic(fmt.Sprintf("engine: no randomness for the instance id: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// singleFSM is a single node's state machine for its metalog.Single: the
// log applies commands directly and never snapshots.
type singleFSM struct{ st *meta.State }

func (f singleFSM) Apply(index uint64, cmd []byte) []byte { return f.st.Apply(index, cmd) }
func (f singleFSM) Snapshot() (metalog.Snapshot, error) {
	return nil, fmt.Errorf("engine: a single node's log takes no snapshots")
}
func (f singleFSM) Restore(io.Reader) error {
	return fmt.Errorf("engine: a single node's log restores no snapshots")
}
