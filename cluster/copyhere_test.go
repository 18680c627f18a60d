package cluster

import (
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/role"
)

// TestClosedHere: a copy target takes a copy only once its state records
// its incarnation (nemesis seed 102: a restarted node's own NODE_GONE,
// applied late, freed its copy) and has applied the streamlet's close
// (nemesis seed 38 of
// ci-3n-r2: a follower cut off from its orderer still held its replica,
// which the recovery had left out of the set; the copy took it for a
// complete one, HOLDERS listed the follower, and the close, applied next,
// freed it: replays stopped at the streamlet).
func TestClosedHere(t *testing.T) {
	st := meta.New()
	now := time.Now().UnixNano()
	apply := func(c meta.Cmd) {
		t.Helper()
		if r := meta.Result(st.Apply(st.Applied()+1, meta.AppendCmd(nil, &c))[0]); r != meta.ResultOK {
			t.Fatalf("%v: %v", c.Kind, r)
		}
	}
	const ttl = int64(time.Hour)
	epoch := st.NewEpoch(now)
	open := func(tail, end, id uint64) meta.Cmd {
		return meta.Cmd{Kind: meta.KindOpen, Time: now, Channel: "ch", Epoch: epoch, Tail: tail,
			Seal: meta.Seal{End: end, TTL: ttl}, New: meta.NewStreamlet{ID: id, Replicas: []string{"a", "b"}, Life: int64(time.Second)}}
	}
	ref := role.StreamletRef{ID: 7, First: 1, End: 28}
	if closedHere(st, "ch", epoch, ref) {
		t.Fatal("a state without the channel counts the streamlet closed")
	}
	apply(open(0, 0, 7))
	if closedHere(st, "ch", epoch, ref) {
		t.Fatal("an open streamlet counts as closed")
	}
	if closedHere(st, "ch", epoch+1, ref) {
		t.Fatal("a state behind the incarnation counts the streamlet closed")
	}
	apply(meta.Cmd{Kind: meta.KindClose, Time: now, Channel: "ch", Epoch: epoch, Tail: 7, Seal: meta.Seal{End: 28, Keep: []string{"a"}, TTL: ttl}})
	if !closedHere(st, "ch", epoch, ref) {
		t.Fatal("the applied close is not seen")
	}
	if copyReady(st, "b", "b2", "ch", epoch, ref) {
		t.Fatal("ready before the state records this node's incarnation")
	}
	apply(meta.Cmd{Kind: meta.KindNodeGone, Time: now, Node: "b", Instance: "b2"})
	if !copyReady(st, "b", "b2", "ch", epoch, ref) || copyReady(st, "b", "b3", "ch", epoch, ref) {
		t.Fatal("ready only for the incarnation the state records")
	}
	if !closedHere(st, "ch", epoch-1, ref) {
		t.Fatal("an earlier incarnation's streamlet is not done with")
	}
	if closedHere(st, "ch", epoch, role.StreamletRef{ID: 9, First: 28, End: 40}) {
		t.Fatal("a streamlet the state has not heard of counts as closed")
	}
	apply(open(7, 0, 8))
	apply(meta.Cmd{Kind: meta.KindExpire, Time: now, Batch: []meta.Ref{{Channel: "ch", Epoch: epoch, ID: 7}}})
	if !closedHere(st, "ch", epoch, ref) {
		t.Fatal("an expired streamlet (before the earliest listed) is not done with")
	}
}
