package membership

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/memberlist"
)

// msgLeaving tags the one user message this package gossips: "the sending
// node is about to leave gracefully". Layout: msgLeaving, then the node name
// (1..NameMax bytes). memberlist marks a gracefully left node Left in its own
// table but reports only "leave" to delegates, so without this message the
// other nodes could not tell a graceful Leave from a crash.
const msgLeaving byte = 1

// delegate implements memberlist.Delegate and memberlist.EventDelegate.
// memberlist calls every method on its own goroutines; the event methods are
// called with memberlist's node lock held, serially, so they must neither
// block nor call back into the Memberlist.
type delegate struct {
	name     string                          // local node name
	meta     atomic.Pointer[[]byte]          // current local metadata, validated, never modified after Store
	left     atomic.Bool                     // set before the local graceful Leave
	tab      *table                          // cluster view
	onChange func(Event)                     // may be nil
	bcast    memberlist.TransmitLimitedQueue // outgoing msgLeaving broadcasts
}

// NodeMeta returns the metadata last validated by Start or UpdateMeta, so
// memberlist never sees a blob over its limit (it panics on one).
func (d *delegate) NodeMeta(limit int) []byte {
	p := d.meta.Load()
	if p == nil || len(*p) > limit {
		return nil
	}
	return *p
}

// NotifyMsg handles a msgLeaving from another node. Anything else is ignored:
// with a Secret, only cluster members can send here; without one, a bogus
// message can at most relabel a departed member from Dead to Left.
func (d *delegate) NotifyMsg(b []byte) {
	if len(b) < 2 || len(b) > 1+NameMax || b[0] != msgLeaving {
		return
	}
	d.tab.markLeaving(string(b[1:]))
}

// GetBroadcasts hands memberlist the queued msgLeaving broadcasts.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.bcast.GetBroadcasts(overhead, limit)
}

// LocalState has no state to push: membership rides on memberlist's own.
func (d *delegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState ignores remote state (see LocalState).
func (d *delegate) MergeRemoteState(buf []byte, join bool) {}

// NotifyJoin records a member becoming alive.
func (d *delegate) NotifyJoin(n *memberlist.Node) { d.event(EventJoin, n) }

// NotifyLeave records a member leaving or being declared dead.
func (d *delegate) NotifyLeave(n *memberlist.Node) { d.event(EventLeave, n) }

// NotifyUpdate records an alive member's new metadata.
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.event(EventUpdate, n) }

// event copies n into the table (n points into memberlist's node map and is
// only stable during this call) and forwards the result to onChange, outside
// the table lock so onChange may call Members or All.
func (d *delegate) event(kind EventKind, n *memberlist.Node) {
	local := n.Name == d.name
	// memberlist's Node.State is not maintained (its node map shadows it),
	// so departure kind is derived: our own graceful leave, else whatever the
	// table knows from msgLeaving.
	st := Dead
	if local && d.left.Load() {
		st = Left
	}
	addr := net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	m := d.tab.apply(kind, n.Name, addr, n.Meta, local, st)
	if d.onChange != nil {
		d.onChange(Event{Kind: kind, Member: m})
	}
}

// leavingBroadcast is one queued msgLeaving. finished is closed when
// memberlist has retransmitted it enough times (or dropped it).
type leavingBroadcast struct {
	msg      []byte
	once     sync.Once
	finished chan struct{}
}

func (b *leavingBroadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b *leavingBroadcast) Message() []byte                       { return b.msg }
func (b *leavingBroadcast) Finished()                             { b.once.Do(func() { close(b.finished) }) }

// slogWriter adapts memberlist's *log.Logger output to a slog.Logger at
// Debug level. Each Write is one log line.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	if w.l.Enabled(context.Background(), slog.LevelDebug) {
		w.l.Debug(string(bytes.TrimRight(p, "\n")), "component", "memberlist")
	}
	return len(p), nil
}
