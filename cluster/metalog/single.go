package metalog

import (
	"context"
	"fmt"
	"sync"
)

// Single is the Log of a node alone: no disk, no network, always the
// leader. Propose applies the command at once, under a mutex, on the
// caller's goroutine, so the FSM's Apply runs on whichever goroutine
// proposes, one at a time, in index order. Create it with NewSingle.
type Single struct {
	node       string
	maxCommand int
	changed    chan struct{}

	mu     sync.Mutex
	fsm    FSM
	index  uint64 // last index applied
	closed bool
}

// NewSingle returns a Single log of node applying to fsm. maxCommand bounds
// a command's length (<= 0: DefaultMaxCommand), as Config.MaxCommand does
// for Raft, so a command a single node accepts a cluster accepts too.
func NewSingle(node string, fsm FSM, maxCommand int) *Single {
	if maxCommand <= 0 {
		maxCommand = DefaultMaxCommand
	}
	s := &Single{node: node, maxCommand: maxCommand, fsm: fsm, changed: make(chan struct{}, 1)}
	s.changed <- struct{}{} // the initial state: leader from the start
	return s
}

// Propose implements Log: it applies cmd now and returns the result.
func (s *Single) Propose(ctx context.Context, cmd []byte) ([]byte, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	if len(cmd) > s.maxCommand {
		return nil, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(cmd), s.maxCommand)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, 0, ErrShutdown
	}
	s.index++
	return s.fsm.Apply(s.index, cmd), s.index, nil
}

// Barrier implements Log: every command is applied when Propose returns,
// so there is nothing to wait for.
func (s *Single) Barrier(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrShutdown
	}
	return nil
}

// Leader implements Log: this node, always.
func (s *Single) Leader() (string, bool) { return s.node, true }

// Leadership implements Log: this node, term 1.
func (s *Single) Leadership() Leadership {
	return Leadership{Term: 1, Leader: s.node, LeaderID: s.node, Self: true}
}

// LeadershipChanged implements Log: one signal at the start, none after.
func (s *Single) LeadershipChanged() <-chan struct{} { return s.changed }

// Status implements Log.
func (s *Single) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Node: s.node, ServerID: s.node, State: "leader", Leadership: s.Leadership(),
		Voters: []Server{{Node: s.node, ID: s.node}}}
	if s.closed {
		st.State = "shutdown"
	}
	if s.index > 0 {
		st.FirstIndex = 1
	}
	st.LastIndex, st.CommitIndex, st.AppliedIndex = s.index, s.index, s.index
	return st
}

// Shutdown implements Log. It waits for a Propose in progress.
func (s *Single) Shutdown() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}
