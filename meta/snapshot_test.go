package meta_test

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/sluice-rtm/sluice/internal/metaload"
	"github.com/sluice-rtm/sluice/meta"
)

// twins applies every command to a state that takes snapshots and to one
// that never does; both must end identical.
type twins struct {
	t          *testing.T
	snap, flat *meta.State
	idx        uint64
}

func newTwins(t *testing.T) *twins { return &twins{t: t, snap: meta.New(), flat: meta.New()} }

func (w *twins) apply(c meta.Cmd) {
	w.t.Helper()
	w.idx++
	b := meta.AppendCmd(nil, &c)
	ra, rb := w.snap.Apply(w.idx, b), w.flat.Apply(w.idx, b)
	if meta.Result(ra[0]) != meta.ResultOK || meta.Result(rb[0]) != meta.ResultOK {
		w.t.Fatalf("command %d (%v %q): %v and %v", w.idx, c.Kind, c.Channel, meta.Result(ra[0]), meta.Result(rb[0]))
	}
}

func (w *twins) load(l *metaload.Load, n int) {
	w.t.Helper()
	for range n {
		w.apply(l.Next())
	}
}

// change applies commands of one kind that change or remove channels in
// place: CLOSE of open tails, HOLDERS, EXPIRE, NODE_GONE (of every
// channel the node held), CREATE and DROP; the load's OPENs come from
// the caller.
func (w *twins) change(kind meta.Kind) {
	w.t.Helper()
	now := int64(1_900_000_000_000_000_000)
	var cmds []meta.Cmd
	k := 0
	w.snap.Range(func(c *meta.Channel) bool {
		k++
		if k%3 != 0 || len(c.List) < 2 {
			return true
		}
		switch kind {
		case meta.KindClose:
			if o, open := c.Open(); open {
				cmds = append(cmds, meta.Cmd{Kind: kind, Time: now, Channel: c.Name, Epoch: c.Epoch, Tail: o.ID,
					Seal: meta.Seal{End: o.First + 3, TTL: 1}})
			}
		case meta.KindHolders:
			cmds = append(cmds, meta.Cmd{Kind: kind, Time: now, Channel: c.Name, Epoch: c.Epoch, Tail: c.List[0].ID,
				Add: []string{"copy-node"}})
		case meta.KindExpire:
			cmds = append(cmds, meta.Cmd{Kind: kind, Time: now, Batch: []meta.Ref{{Channel: c.Name, Epoch: c.Epoch, ID: c.List[0].ID}}})
		}
		return true
	})
	switch kind {
	case meta.KindNodeGone:
		cmds = append(cmds, meta.Cmd{Kind: kind, Time: now, Node: "sluice-3", Instance: "sluice-3b"})
	case meta.KindDrop:
		cmds = append(cmds, meta.Cmd{Kind: meta.KindCreate, Time: now, Channel: "created", Epoch: w.snap.NewEpoch(now)})
	}
	if len(cmds) == 0 {
		w.t.Fatalf("no %v to apply", kind)
	}
	for _, c := range cmds {
		w.apply(c)
	}
	if kind == meta.KindDrop {
		c, _ := w.snap.Channel("created")
		w.apply(meta.Cmd{Kind: kind, Time: now, Batch: []meta.Ref{{Channel: "created", Epoch: c.Epoch}}})
	}
}

// gate is a writer whose first Write reports on started and then waits
// for proceed: a Persist held there has encoded one chunk and reads the
// rest of its channels only after what the test does meanwhile.
type gate struct {
	buf      bytes.Buffer
	started  chan struct{}
	proceed  chan struct{}
	unblock1 bool
}

func (g *gate) Write(b []byte) (int, error) {
	if !g.unblock1 {
		g.unblock1 = true
		close(g.started)
		<-g.proceed
	}
	return g.buf.Write(b)
}

// TestSnapshot_PointInTimeWhileApplying: snapshots are encoded by
// Persist on other goroutines while commands go on applying to the
// channels they hold, one kind of change after each snapshot (rollovers
// and expiries, closes, holders, expiries, a node gone, a channel created
// and dropped), the snapshots overlapping; each writes the state as it
// was when taken, which restores to an equal state, and the state that
// took them ends identical to one that applied the same commands without
// snapshots. Under -race this also checks that Persist reads nothing
// Apply writes.
func TestSnapshot_PointInTimeWhileApplying(t *testing.T) {
	w := newTwins(t)
	l := metaload.New(metaload.Config{Channels: 2000, Keep: 6, ExpireBatch: 64})
	w.load(l, 2000*7)
	type taken struct {
		what string
		want []byte
		g    *gate
		done chan error
	}
	var snaps []taken
	rounds := []meta.Kind{meta.KindOpen, meta.KindClose, meta.KindHolders, meta.KindExpire, meta.KindNodeGone, meta.KindDrop}
	for _, kind := range rounds {
		p := w.snap.Snapshot()
		tk := taken{what: kind.String(), want: p.Append(nil), g: &gate{started: make(chan struct{}), proceed: make(chan struct{})},
			done: make(chan error, 1)}
		if len(tk.want) < 4*64<<10 {
			t.Fatalf("a snapshot of %d bytes: too small to be encoded in several chunks", len(tk.want))
		}
		go func() { tk.done <- p.Persist(tk.g) }()
		<-tk.g.started // one chunk written; the rest is read after the changes below
		snaps = append(snaps, tk)
		if kind == meta.KindOpen {
			w.load(l, 2000*2)
		} else {
			w.change(kind)
		}
	}
	for _, tk := range snaps {
		close(tk.g.proceed)
		if err := <-tk.done; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tk.g.buf.Bytes(), tk.want) {
			t.Fatalf("the snapshot taken before %s: Persist wrote %d bytes that differ from the state when it was taken (%d bytes)",
				tk.what, tk.g.buf.Len(), len(tk.want))
		}
		r := meta.New()
		if err := r.Restore(bytes.NewReader(tk.g.buf.Bytes()), 1<<30); err != nil {
			t.Fatalf("the snapshot taken before %s: %v", tk.what, err)
		}
		if got := r.AppendSnapshot(nil); !bytes.Equal(got, tk.want) {
			t.Fatalf("the snapshot taken before %s restores to another state", tk.what)
		}
	}
	if a, b := w.snap.AppendSnapshot(nil), w.flat.AppendSnapshot(nil); !bytes.Equal(a, b) {
		t.Fatal("the state that took snapshots differs from the one that did not")
	}
}

// TestSnapshot_CaptureEncodesNothing: taking a snapshot on the applying
// goroutine allocates a pointer per channel and the node incarnations,
// never the encoding (about 400 bytes per channel here): the encoding is
// Persist's work, off the applying goroutine, so a large state does not
// hold its commands up. Encoding it at capture, as before, allocated at
// least the snapshot's size.
func TestSnapshot_CaptureEncodesNothing(t *testing.T) {
	s := meta.New()
	l := metaload.New(metaload.Config{Channels: 5000, Keep: 6})
	for i := range uint64(5000 * 7) {
		c := l.Next()
		s.ApplyCmd(i+1, &c)
	}
	size := len(s.AppendSnapshot(nil))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	p := s.Snapshot()
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	if limit := uint64(s.Len())*16 + 4<<10; alloc > limit {
		t.Fatalf("Snapshot allocated %d bytes for %d channels (limit %d; the encoding is %d bytes)", alloc, s.Len(), limit, size)
	}
	if p.Len() != s.Len() || len(p.Append(nil)) != size {
		t.Fatalf("the snapshot holds %d channels, %d bytes; the state %d, %d bytes", p.Len(), len(p.Append(nil)), s.Len(), size)
	}
	t.Logf("%d channels: capture allocated %d bytes, the encoding is %d bytes", s.Len(), alloc, size)
}
