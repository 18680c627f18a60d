package host

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-rtm/sluice/role"
)

func TestSealReturnsTheEndAndIsIdempotent(t *testing.T) {
	h := New("h", time.Now)
	g := role.Grant{Channel: "c", Streamlet: h.NewID(), First: 10, LimitMsgs: 10, LimitSize: 1 << 20, LeaseEnd: 1 << 62}
	if err := h.HostStreamlet(g); err != nil {
		t.Fatal(err)
	}
	s := h.Streamlet(g.Streamlet)
	if _, err := s.Append([]byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if end, err := h.Seal(g.Streamlet); err != nil || end != 11 {
			t.Fatalf("seal: %d, %v", end, err)
		}
	}
	if _, err := s.Append([]byte("late"), 1); !errors.Is(err, role.ErrStreamletClosed) {
		t.Fatalf("append after the seal: %v", err)
	}
}

// TestFreeGivesBackTheMaps: once the streamlets of many channels are freed,
// the host's maps (by id, by channel) are fresh ones sized for what is left
// (a Go map keeps the memory of its peak otherwise: issue 14's idle server
// after 100,000 small channels expired).
func TestFreeGivesBackTheMaps(t *testing.T) {
	h := New("h", time.Now)
	var ids []uint64
	for i := range 4096 {
		g := role.Grant{Channel: fmt.Sprint("c", i), Epoch: 1, Streamlet: h.NewID(), First: 1, LimitMsgs: 10, LimitSize: 1 << 20, LeaseEnd: 1 << 62}
		if err := h.HostStreamlet(g); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, g.Streamlet)
	}
	byID, byChan := reflect.ValueOf(h.streamlets).UnsafePointer(), reflect.ValueOf(h.byChan).UnsafePointer()
	for _, id := range ids[:4000] {
		h.Free(id)
	}
	if reflect.ValueOf(h.streamlets).UnsafePointer() == byID || reflect.ValueOf(h.byChan).UnsafePointer() == byChan {
		t.Fatal("the maps of 4,096 streamlets were kept after 4,000 were freed")
	}
	if len(h.streamlets) != 96 || len(h.byChan) != 96 {
		t.Fatalf("%d streamlets, %d channels left, want 96", len(h.streamlets), len(h.byChan))
	}
	for _, id := range ids[4000:] {
		if h.Streamlet(id) == nil {
			t.Fatalf("streamlet %d lost in the copy", id)
		}
	}
}

// TestStreamletIsSmall: a hosted streamlet fits the allocator's 160-byte
// class (a copy's own fields live apart), since every small channel holds
// one (issue 14).
func TestStreamletIsSmall(t *testing.T) {
	if size := unsafe.Sizeof(Streamlet{}); size > 160 {
		t.Fatalf("Streamlet is %d bytes, want at most 160", size)
	}
	h := New("h", time.Now)
	c := h.NewCopy(h.NewID(), "c", 1, role.Limits{Msgs: 10, Size: 1 << 10}, "other")
	if c.CopyOf() != "other" || c.LastFill() == 0 || c.BrokenAt() != 0 {
		t.Fatalf("copy: of %q, last fill %d, broken at %d", c.CopyOf(), c.LastFill(), c.BrokenAt())
	}
	c.Break()
	if c.BrokenAt() == 0 {
		t.Fatal("Break did not record when")
	}
	c.Drop()
}

type countWaker struct{ n int }

func (w *countWaker) Wake() { w.n++ }

// TestSideWakersAndAdoption: the side a streamlet gets on its first waker
// wakes it on appends until it is removed; a copy's side reports where it
// came from until the copy is adopted.
func TestSideWakersAndAdoption(t *testing.T) {
	h := New("h", time.Now)
	g := role.Grant{Channel: "c", Epoch: 1, Streamlet: h.NewID(), First: 1, LimitMsgs: 10, LimitSize: 1 << 20, LeaseEnd: 1 << 62}
	if err := h.HostStreamlet(g); err != nil {
		t.Fatal(err)
	}
	s := h.Streamlet(g.Streamlet)
	if s.side.Load() != nil || s.CopyOf() != "" {
		t.Fatal("a hosted streamlet without wakers has a side")
	}
	w := &countWaker{}
	s.AddWaker(w)
	if _, err := s.Append([]byte("x"), time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	if w.n == 0 || s.CopyOf() != "" || s.LastFill() != 0 {
		t.Fatalf("woken %d times, CopyOf %q, LastFill %d", w.n, s.CopyOf(), s.LastFill())
	}
	s.RemoveWaker(w)
	before := w.n
	if _, err := s.Append([]byte("y"), time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	if w.n != before {
		t.Fatal("a removed waker was woken")
	}
	c := h.NewCopy(h.NewID(), "c", 1, role.Limits{Msgs: 10, Size: 1 << 20}, "other")
	c.Fill(0, 1, func(int) ([]byte, bool, int64) { return []byte("z"), false, 1 }, true)
	if c.CopyOf() != "other" {
		t.Fatalf("copy of %q", c.CopyOf())
	}
	if err := h.Adopt(c, role.Hosted{ID: c.ID(), Epoch: 1, First: 1, Len: 1, Sealed: true, LimitMsgs: 10}); err != nil {
		t.Fatal(err)
	}
	if c.CopyOf() != "" || h.Streamlet(c.ID()) != c {
		t.Fatalf("adopted copy: CopyOf %q, hosted %v", c.CopyOf(), h.Streamlet(c.ID()) == c)
	}
	if err := h.Adopt(c, role.Hosted{ID: c.ID(), Epoch: 1, First: 1, Len: 1, Sealed: true}); err == nil {
		t.Fatal("a copy was adopted twice")
	}
}

// TestSealUnknownBars: an id sealed before it was hosted is never hosted
// afterwards (a manager closed it while its opener's host call was late);
// other ids are hosted as usual.
func TestSealUnknownBars(t *testing.T) {
	h := New("h", time.Now)
	id, other := h.NewID(), h.NewID()
	if _, err := h.Seal(id); !errors.Is(err, role.ErrUnknownStreamlet) {
		t.Fatalf("seal of an unknown id: %v", err)
	}
	g := role.Grant{Channel: "f", Epoch: 1, Streamlet: id, Host: "h", First: 1, LimitMsgs: 10, LimitSize: 1 << 10,
		LeaseEnd: time.Now().Add(time.Minute).UnixNano()}
	if err := h.HostStreamlet(g); !errors.Is(err, ErrBarred) {
		t.Fatalf("hosting a barred id: %v, want ErrBarred", err)
	}
	g.Streamlet = other
	if err := h.HostStreamlet(g); err != nil {
		t.Fatalf("hosting another id: %v", err)
	}
}
