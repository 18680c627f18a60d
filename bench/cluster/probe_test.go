package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client"
)

// TestProbe_ListRedial: LIST reports the streamlet holding what was
// published and nothing for an unused channel, a probe whose connection
// broke dials again, and a node that answers with another name is refused.
func TestProbe_ListRedial(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ns, err := StartNodes(ctx, 1, true, "p", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	c, err := client.Dial(ctx, ns.Servers[0].Addr(), client.WithReconnect(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 10; i++ {
		if _, err := c.Publish(ctx, "probe.ch", []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := DialProbes(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	mgr, err := ns.ManagerOf("probe.ch")
	if err != nil || mgr != "pa" {
		t.Fatalf("manager %q, %v; want pa", mgr, err)
	}
	pl, err := ps.Place("probe.ch", mgr)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Manager != "pa" || pl.Streamlets["pa"] != 1 || pl.Msgs["pa"] != 10 {
		t.Fatalf("placement %+v, want one streamlet of 10 messages on pa", pl)
	}
	if hs, err := ps[0].List("probe.never"); err != nil || len(hs) != 0 {
		t.Fatalf("unused channel: %v, %v", hs, err)
	}
	_ = ps[0].conn.Close() // the next call fails and marks the probe broken
	if _, err := ps[0].List("probe.ch"); err == nil {
		t.Fatal("List on a closed connection succeeded")
	}
	hs, err := ps[0].List("probe.ch")
	if err != nil || len(hs) != 1 || hs[0].Len != 10 {
		t.Fatalf("after redial: %+v, %v", hs, err)
	}
	if _, err := DialProbe(ns.Servers[0].Addr(), "other", "probe", time.Second); !errors.Is(err, ErrProbe) {
		t.Fatalf("probe of a node under another name: %v, want ErrProbe", err)
	}
}
