package metalog

import (
	"io"

	"github.com/hashicorp/raft"
)

// fsmAdapter is the raft.FSM over an FSM. raft calls Apply, Snapshot and
// Restore on its FSM goroutine, one at a time; Persist on a snapshot
// goroutine.
type fsmAdapter struct{ fsm FSM }

// Apply implements raft.FSM. Only commands reach the FSM (raft handles
// configuration entries and its no-ops itself).
func (a *fsmAdapter) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	return a.fsm.Apply(l.Index, l.Data)
}

// Snapshot implements raft.FSM.
func (a *fsmAdapter) Snapshot() (raft.FSMSnapshot, error) {
	s, err := a.fsm.Snapshot()
	if err != nil {
		return nil, err
	}
	return snapshotAdapter{s}, nil
}

// Restore implements raft.FSM.
func (a *fsmAdapter) Restore(r io.ReadCloser) error {
	defer r.Close()
	return a.fsm.Restore(r)
}

// snapshotAdapter is the raft.FSMSnapshot over a Snapshot.
type snapshotAdapter struct{ s Snapshot }

// Persist implements raft.FSMSnapshot: it writes the snapshot to sink and
// closes it, or cancels it on failure.
func (s snapshotAdapter) Persist(sink raft.SnapshotSink) error {
	if err := s.s.Persist(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (s snapshotAdapter) Release() { s.s.Release() }
