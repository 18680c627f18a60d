package meta

import (
	"slices"

	"github.com/sluice-rtm/sluice/role"
)

// Channel is one channel incarnation's committed state. Values handed out
// by State are copies the caller owns.
//
// Invariants (checked by check, in tests after every command):
//   - Epoch > 0, and a name's later incarnation has a larger epoch;
//   - List is ordered by First, every entry but possibly the last is
//     closed, and List[i].End == List[i+1].First (no gaps, no overlap);
//   - Next == the open streamlet's First, or the last End when all are
//     closed; positions start at 1 in each incarnation and a position is
//     covered by at most one streamlet ever (expiry removes a prefix, and
//     Next never decreases);
//   - Expires is non-decreasing along the closed entries, so a later
//     streamlet never expires before an earlier one;
//   - every streamlet has an id; an open one has at least one replica.
type Channel struct {
	Name  string
	Epoch uint64
	// Next is the first position of the next streamlet to open: the open
	// streamlet's First while one is open.
	Next uint64
	// List holds the retained streamlets, oldest first; only the last may
	// be open.
	List []role.StreamletRef
	// Seq counts the streamlets opened in this incarnation (the placement
	// key of the next one).
	Seq uint64
	// Used is when the channel last changed (a command's Time, unix ns).
	Used int64

	// gen is the State's snapshot generation when this value was made
	// (State.writable); 0 in the copies State hands out.
	gen uint64
}

// Tail returns the newest streamlet, if any.
func (c *Channel) Tail() (role.StreamletRef, bool) {
	if n := len(c.List); n > 0 {
		return c.List[n-1], true
	}
	return role.StreamletRef{}, false
}

// Open returns the open streamlet, if any.
func (c *Channel) Open() (role.StreamletRef, bool) {
	if t, ok := c.Tail(); ok && !t.Closed {
		return t, true
	}
	return role.StreamletRef{}, false
}

// TailID returns the id of the newest streamlet, 0 when the list is empty
// (what an OPEN's Tail must name).
func (c *Channel) TailID() uint64 {
	t, _ := c.Tail()
	return t.ID
}

// Info returns the reader's view; openLen is how many messages the open
// streamlet holds (as its orderer reports; 0 if unknown).
func (c *Channel) Info(openLen int) role.ChannelInfo {
	ci := role.ChannelInfo{Epoch: c.Epoch, Next: c.Next, Earliest: c.Next}
	if len(c.List) > 0 {
		ci.Earliest = c.List[0].First
		ci.Streamlets = slices.Clone(c.List)
		if s, ok := c.Open(); ok {
			ci.Next = s.First + uint64(openLen)
		}
	}
	return ci
}

// clone returns a deep copy (the list and its replica sets).
func (c *Channel) clone() *Channel {
	d := *c
	d.List = cloneList(c.List)
	d.gen = 0
	return &d
}

func cloneList(l []role.StreamletRef) []role.StreamletRef {
	if l == nil {
		return nil
	}
	out := slices.Clone(l)
	for i := range out {
		out[i].Replicas = slices.Clone(out[i].Replicas)
	}
	return out
}

// setReplicas stores set (orderer or first holder first) in s the way
// role.StreamletRef carries it: Host the first, Replicas only when there
// are several.
func setReplicas(s *role.StreamletRef, set []string) {
	s.Host, s.Replicas = "", nil
	if len(set) > 0 {
		s.Host = set[0]
	}
	if len(set) > 1 {
		s.Replicas = slices.Clone(set)
	}
}

// closeTail closes the open tail as seal says at now. It reports false,
// changing nothing, when the tail is not open or seal.End is below its
// First.
func (c *Channel) closeTail(seal *Seal, now int64) bool {
	n := len(c.List)
	if n == 0 || c.List[n-1].Closed || seal.End < c.List[n-1].First {
		return false
	}
	s := &c.List[n-1]
	s.End, s.Closed, s.Lost = seal.End, true, seal.Lost
	if len(seal.Keep) > 0 {
		setReplicas(s, seal.Keep)
	}
	s.Expires = now + seal.TTL
	if n > 1 && s.Expires < c.List[n-2].Expires {
		s.Expires = c.List[n-2].Expires
	}
	c.Next = s.End
	c.Used = now
	return true
}

// open appends nw as the open streamlet at Next; the tail must be closed
// (or the list empty).
func (c *Channel) open(nw *NewStreamlet, now int64) role.StreamletRef {
	s := role.StreamletRef{ID: nw.ID, First: c.Next, LeaseEnd: now + nw.Life}
	setReplicas(&s, nw.Replicas)
	c.List = append(c.List, s)
	c.Seq++
	c.Used = now
	return s
}

// holders changes closed streamlet id's holders: add first, then remove.
// A streamlet left with none is lost. It returns the entry after the
// change and false when id is not a closed, not lost streamlet of the list.
func (c *Channel) holders(id uint64, add, remove []string) (role.StreamletRef, bool) {
	for i := range c.List {
		s := &c.List[i]
		if s.ID != id {
			continue
		}
		if !s.Closed || s.Lost {
			return role.StreamletRef{}, false
		}
		set := s.Set()
		var nset []string
		for _, a := range add {
			if !slices.Contains(set, a) && !slices.Contains(nset, a) {
				nset = append(nset, a)
			}
		}
		nset = append(nset, set...)
		nset = slices.DeleteFunc(nset, func(n string) bool { return slices.Contains(remove, n) })
		if len(nset) > MaxSet {
			nset = nset[:MaxSet]
		}
		setReplicas(s, nset)
		if len(nset) == 0 {
			s.Lost = true
		}
		return *s, true
	}
	return role.StreamletRef{}, false
}

// holdsClosed reports whether node holds a closed streamlet that is not
// lost (what nodeGone changes).
func (c *Channel) holdsClosed(node string) bool {
	for i := range c.List {
		if s := &c.List[i]; s.Closed && !s.Lost && slices.Contains(s.Set(), node) {
			return true
		}
	}
	return false
}

// nodeGone takes node out of every closed streamlet's holders and returns
// the entries it changed.
func (c *Channel) nodeGone(node string) []role.StreamletRef {
	var changed []role.StreamletRef
	for i := range c.List {
		s := &c.List[i]
		if !s.Closed || s.Lost || !slices.Contains(s.Set(), node) {
			continue
		}
		if r, ok := c.holders(s.ID, nil, []string{node}); ok {
			changed = append(changed, r)
		}
	}
	return changed
}

// expiring returns how many streamlets expiring through id removes: those
// up to and including id when it is a closed streamlet of the list, else
// 0. Only a prefix goes, so a later streamlet never expires first.
func (c *Channel) expiring(id uint64) int {
	for i := range c.List {
		if !c.List[i].Closed {
			break
		}
		if c.List[i].ID == id {
			return i + 1
		}
	}
	return 0
}

// expire removes the first k streamlets (expiring's count) and returns
// them.
func (c *Channel) expire(k int) []role.StreamletRef {
	out := slices.Clone(c.List[:k])
	c.List = slices.Delete(c.List, 0, k)
	return out
}
