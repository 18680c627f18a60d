package presence

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// watcher is a client of one node's sink 0 that keeps a channel's member
// set the way an SDK does: a query, then the events delivered after it;
// after a resume (an occupancy without Paused) it queries again.
type watcher struct {
	set   map[string]bool
	stale bool // paused: the set is not maintained
}

func (w *watcher) resync(r *Registry, ch string) {
	_, ms, _ := r.Query(ch, false, nil)
	w.set = map[string]bool{}
	for _, n := range names(ms) {
		w.set[n] = true
	}
	w.stale = false
}

// deliver applies the queued deliveries; the query that follows a resume
// reads the registry after every delivery queued so far was taken, as a
// loop answers a query after it delivered what it had taken.
func (w *watcher) deliver(r *Registry, ch string) {
	resume := false
	for _, d := range r.Take(0, nil) {
		n := fmt.Sprintf("%s/%d/%s", d.Member.Node, d.Member.Conn, d.Member.ClientID)
		switch d.Kind {
		case Join:
			w.set[n] = true
		case Leave:
			delete(w.set, n)
		case Occupancy:
			w.stale = d.Paused
			resume = !d.Paused
		}
	}
	if resume {
		w.resync(r, ch)
	}
}

// TestModelRandomSchedules runs random schedules of joins, leaves,
// counts, pushes in any order between any two nodes, lost pushes and
// lost answers, restarts and membership deaths, on three nodes, and then
// checks that after the pushes settle (1) every node's picture of every
// channel is the union of the live nodes' local parts (members and
// counts), and (2) a watcher that queried once and applied its events
// from then on (querying again after each resume) holds the same set.
func TestModelRandomSchedules(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 30
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, uint64(seed)) })
	}
}

func runModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	nodes := []string{"a", "b", "c"}
	chans := []string{"x", "y"}
	lim := Limits{MaxMembers: 1000, MaxBytes: 1 << 30, EventsMax: 3 + rng.IntN(6)}
	cl := newCluster(t, lim, nodes...)
	// local is each node's local part as the model sees it: members
	// (conn/id -> info) and subscriptions per channel.
	type localPart struct {
		members map[string]map[key]string
		subs    map[string]int
	}
	local := map[string]*localPart{}
	fresh := func(n string) { local[n] = &localPart{members: map[string]map[key]string{}, subs: map[string]int{}} }
	for _, n := range nodes {
		fresh(n)
	}
	alive := map[string]bool{"a": true, "b": true, "c": true}
	liveList := func() []string {
		var l []string
		for _, n := range nodes {
			if alive[n] {
				l = append(l, n)
			}
		}
		return l
	}
	w := &watcher{}
	cl["a"].Watch("x", 0, 1, 0)
	w.resync(cl["a"], "x")

	for step := range 400 {
		n := nodes[rng.IntN(3)]
		ch := chans[rng.IntN(2)]
		lp := local[n]
		switch op := rng.IntN(20); {
		case !alive[n] && op < 19:
		case op < 5: // join
			k := key{uint64(rng.IntN(6)), fmt.Sprint("u", rng.IntN(2))}
			info := fmt.Sprint("i", step)
			if lp.members[ch] == nil {
				lp.members[ch] = map[key]string{}
			}
			if _, ok := lp.members[ch][k]; ok {
				continue // a second subscription would need a second leave
			}
			if err := cl[n].Join(ch, k.conn, k.id, []byte(info)); err != nil {
				t.Fatal(err)
			}
			lp.members[ch][k] = info
		case op < 8: // leave
			keys := slices.SortedFunc(maps.Keys(lp.members[ch]), func(a, b key) int {
				return cmp.Or(cmp.Compare(a.conn, b.conn), cmp.Compare(a.id, b.id))
			})
			if len(keys) > 0 {
				k := keys[rng.IntN(len(keys))]
				cl[n].Leave(ch, k.conn, k.id)
				delete(lp.members[ch], k)
			}
		case op < 10: // subscriptions
			d := 1
			if lp.subs[ch] > 0 && rng.IntN(2) == 0 {
				d = -1
			}
			cl[n].Count(ch, d, 0)
			lp.subs[ch] += d
		case op < 17: // a push between two live nodes, maybe lost
			to := nodes[rng.IntN(3)]
			if to == n || !alive[to] {
				continue
			}
			body := cl[n].NextPush(to)
			if body == nil {
				continue
			}
			if rng.IntN(6) == 0 {
				cl[n].Done(to, 0, 0, errors.New("lost on the way"))
				continue
			}
			res, err := cl[to].Serve(n, body)
			if err != nil && !errors.Is(err, ErrNotMember) {
				t.Fatal(err)
			}
			if rng.IntN(6) == 0 || err != nil {
				cl[n].Done(to, 0, 0, errors.New("answer lost"))
				continue
			}
			st, inc, _ := wire.DecodeSyncResult(res)
			cl[n].Done(to, st, inc, nil)
		case op < 18 && n != "a": // restart: the node comes back empty, with a new incarnation
			cl[n], _ = newTest(n, lim)
			fresh(n)
			cl[n].Peers(liveList())
		case op < 19 && n != "a" && rng.IntN(3) == 0: // the others see it dead a moment, not it
			var others []string
			for _, m := range liveList() {
				if m != n {
					others = append(others, m)
				}
			}
			cl.members(others...)
			for _, m := range others {
				cl[m].Peers(liveList())
			}
		case op < 19 && n != "a": // the membership declares it dead
			alive[n] = false
			cl.members(liveList()...)
		default: // back: alive again, restarted
			if alive[n] || n == "a" {
				continue
			}
			alive[n] = true
			cl[n], _ = newTest(n, lim)
			fresh(n)
			cl.members(liveList()...)
		}
		if rng.IntN(4) == 0 {
			cl["a"].Tick()
		}
		w.deliver(cl["a"], "x")
	}
	live := cluster{}
	for _, n := range liveList() {
		live[n] = cl[n]
	}
	live.pump(t)
	cl["a"].Tick()
	w.deliver(cl["a"], "x")
	for _, ch := range chans {
		var want []string
		var subs, members uint32
		for _, n := range liveList() {
			for k := range local[n].members[ch] {
				want = append(want, fmt.Sprintf("%s/%d/%s", n, k.conn, k.id))
				members++
			}
			subs += uint32(local[n].subs[ch])
		}
		slices.Sort(want)
		for _, n := range liveList() {
			o, got, partial := query(cl[n], ch)
			if !slices.Equal(got, want) || o.Members != members || o.Subscribers != subs || partial {
				t.Fatalf("seed %d: %s sees %s as %v %+v partial=%v\nwant %v (%d subscriptions)", seed, n, ch, got, o, partial, want, subs)
			}
		}
	}
	if w.stale {
		return // paused at the end: the watcher knows its set is not kept
	}
	got := slices.Sorted(maps.Keys(w.set))
	_, want, _ := query(cl["a"], "x")
	if !slices.Equal(got, want) {
		t.Fatalf("seed %d: the watcher holds %v, a's picture is %v", seed, got, want)
	}
}
