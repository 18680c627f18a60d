package host

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
)

func TestSealRecordsOneSuccessor(t *testing.T) {
	h := New("h", time.Now)
	g := role.Grant{Channel: "c", Streamlet: h.NewID(), First: 10, LimitMsgs: 10, LimitSize: 1 << 20, LeaseEnd: 1 << 62}
	if err := h.HostStreamlet(g); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Seal(g.Streamlet, 5, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Seal(g.Streamlet, 5, "x"); err != nil {
		t.Fatalf("the same successor again: %v", err)
	}
	if _, err := h.Seal(g.Streamlet, 0, ""); err != nil {
		t.Fatalf("a plain seal: %v", err)
	}
	if _, err := h.Seal(g.Streamlet, 6, "y"); !errors.Is(err, role.ErrSuccessorTaken) {
		t.Fatalf("another successor: %v, want ErrSuccessorTaken", err)
	}
	hs, _ := h.List("c")
	if len(hs) != 1 || hs[0].Succ != 5 || hs[0].SuccHost != "x" || !hs[0].Sealed {
		t.Fatalf("listed %+v", hs)
	}
}
