package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client"
	"github.com/sluice-rtm/sluice/engine"
	"github.com/sluice-rtm/sluice/internal/proctest"
)

// TestPresenceAfterKill9: three `sluice serve` processes; a Go SDK member
// on each; `sluice presence` on any node lists the three (each with its
// node); after kill -9 of one node, `sluice presence` on the others lists
// the two left within the 5 s docs/presence.md states.
func TestPresenceAfterKill9(t *testing.T) {
	names := []string{"a", "b", "c"}
	c := newMPCluster(t, names...)
	a, b, cn := c.nodes["a"], c.nodes["b"], c.nodes["c"]
	c.start(a)
	c.start(b, a.gossip)
	c.start(cn, a.gossip)
	c.waitStatus("three alive members everywhere", 30*time.Second,
		func(st engine.Status) bool { return len(st.Members) == 3 && aliveMembers(st) == 3 }, a, b, cn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, n := range []*mpNode{a, b, cn} {
		conn, err := client.Dial(ctx, n.client, client.WithReconnect(false))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Subscribe(ctx, "mp.room", client.WithPresence()); err != nil {
			t.Fatal(err)
		}
	}
	// The member lines' node column, sorted as the command prints them.
	nodesOf := func(n *mpNode) (string, string) {
		code, out, errs := runCmd(ctx, "", "presence", "--server", n.client, "mp.room")
		if code != exitOK {
			return "", errs
		}
		var ns []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Split(l, "\t"); f[0] == "member" {
				ns = append(ns, f[2])
			}
		}
		return strings.Join(ns, ","), out
	}
	for _, n := range []*mpNode{a, b, cn} {
		proctest.WaitUntil(t, n.Name+" lists the three members", 10*time.Second, 20*time.Millisecond, func() (bool, string) {
			got, out := nodesOf(n)
			return got == "a,b,c", out
		})
	}
	killed := time.Now()
	c.kill(cn)
	for _, n := range []*mpNode{a, b} {
		proctest.WaitUntil(t, n.Name+" drops c's member", 15*time.Second, 20*time.Millisecond, func() (bool, string) {
			got, out := nodesOf(n)
			return got == "a,b", out
		})
	}
	if d := time.Since(killed); d > 5*time.Second {
		t.Errorf("c's member left after %v, the stated bound is 5s", d)
	} else {
		t.Logf("c's member left both pictures %v after kill -9", d)
	}
}
