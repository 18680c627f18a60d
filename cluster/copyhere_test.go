package cluster

import (
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
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

// TestCopyHere_HoldsExactlyOrCopiesAgain: a copy target that already holds
// the streamlet succeeds at once only when it holds exactly the committed
// records, sealed; anything else under the id is freed and copied again
// (here the holder is unreachable, so the copy fails), so the HOLDERS that
// follows a copy never lists a node without the records. (Once, on nemesis
// seed 2 of 5n-r3, replays on two listed holders stopped at a streamlet
// they served empty; this is one path to that state, not reproduced in
// three further runs of the seed.)
func TestCopyHere_HoldsExactlyOrCopiesAgain(t *testing.T) {
	now := time.Now().UnixNano()
	for _, tc := range []struct {
		name      string
		held      int
		sealed    bool
		wantHeld  bool
		wantError bool
	}{
		{"complete", 3, true, true, false},
		{"short", 1, true, false, true},
		{"complete but open", 3, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := host.New("b", time.Now)
			st := meta.New()
			apply := func(cmd meta.Cmd) {
				t.Helper()
				if r := meta.Result(st.Apply(st.Applied()+1, meta.AppendCmd(nil, &cmd))[0]); r != meta.ResultOK {
					t.Fatalf("%v: %v", cmd.Kind, r)
				}
			}
			epoch := st.NewEpoch(now)
			apply(meta.Cmd{Kind: meta.KindOpen, Time: now, Channel: "ch", Epoch: epoch,
				New: meta.NewStreamlet{ID: 7, Replicas: []string{"a"}, Life: int64(time.Second)}})
			apply(meta.Cmd{Kind: meta.KindClose, Time: now, Channel: "ch", Epoch: epoch, Tail: 7, Seal: meta.Seal{End: 4, TTL: int64(time.Hour)}})
			apply(meta.Cmd{Kind: meta.KindNodeGone, Time: now, Node: "b", Instance: "b1"})
			ref := role.StreamletRef{ID: 7, Host: "a", First: 1, End: 4, Closed: true}
			lim := role.Limits{Msgs: 10, Size: 1 << 20}
			if tc.sealed { // an adopted copy
				s := h.NewCopy(7, "ch", 1, lim, "a")
				s.Fill(0, tc.held, func(i int) ([]byte, bool, int64) { return []byte{byte(i)}, false, now }, true)
				if err := h.Adopt(s, role.Hosted{ID: 7, Epoch: epoch, First: 1, Len: uint32(tc.held), Sealed: true}); err != nil {
					t.Fatal(err)
				}
			} else { // hosted under the id, open
				g := role.Grant{Channel: "ch", Epoch: epoch, Streamlet: 7, Host: "b", First: 1, LimitMsgs: 10, LimitSize: 1 << 20,
					LeaseEnd: now + int64(time.Hour)}
				if err := h.HostStreamlet(g); err != nil {
					t.Fatal(err)
				}
				for i := range tc.held {
					if _, err := h.Streamlet(7).Append([]byte{byte(i)}, now); err != nil {
						t.Fatal(err)
					}
				}
			}
			c := unstarted(t, "b", h, st, Options{Listen: "127.0.0.1:0", RPCTimeout: 20 * time.Millisecond})
			err := c.copyHere("ch", epoch, ref)
			if (err != nil) != tc.wantError {
				t.Fatalf("copyHere: %v, want an error: %v", err, tc.wantError)
			}
			if held := h.Streamlet(7) != nil; held != tc.wantHeld {
				t.Fatalf("held after copyHere: %v, want %v", held, tc.wantHeld)
			}
		})
	}
}
