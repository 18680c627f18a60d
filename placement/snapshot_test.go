package placement

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestNewSnapshotRejectsBadInput(t *testing.T) {
	ok := Node{ID: "a", Capacity: 1, State: Alive}
	with := func(f func(*Node)) []Node { n := ok; f(&n); return []Node{n} }
	tests := []struct {
		name  string
		nodes []Node
		opts  Options
		want  error
	}{
		{"empty ID", with(func(n *Node) { n.ID = "" }), Options{}, ErrInvalidNode},
		{"zero capacity", with(func(n *Node) { n.Capacity = 0 }), Options{}, ErrInvalidNode},
		{"negative capacity", with(func(n *Node) { n.Capacity = -1 }), Options{}, ErrInvalidNode},
		{"NaN capacity", with(func(n *Node) { n.Capacity = math.NaN() }), Options{}, ErrInvalidNode},
		{"Inf capacity", with(func(n *Node) { n.Capacity = math.Inf(1) }), Options{}, ErrInvalidNode},
		{"unknown state", with(func(n *Node) { n.State = 9 }), Options{}, ErrInvalidNode},
		{"CPU above 1", with(func(n *Node) { n.Load.CPU = 1.5 }), Options{}, ErrInvalidNode},
		{"negative mem", with(func(n *Node) { n.Load.Mem = -0.1 }), Options{}, ErrInvalidNode},
		{"negative streamlets", with(func(n *Node) { n.Load.Streamlets = -1 }), Options{}, ErrInvalidNode},
		{"NaN rate", with(func(n *Node) { n.Load.MsgsInPerSec = math.NaN() }), Options{}, ErrInvalidNode},
		{"Inf bytes", with(func(n *Node) { n.Load.BytesOutPerSec = math.Inf(1) }), Options{}, ErrInvalidNode},
		{"duplicate ID", []Node{ok, ok}, Options{}, ErrInvalidNode},
		{"negative epsilon", []Node{ok}, Options{Epsilon: -0.1}, ErrInvalidOptions},
		{"NaN epsilon", []Node{ok}, Options{Epsilon: math.NaN()}, ErrInvalidOptions},
		{"negative points", []Node{ok}, Options{PointsPerUnit: -1}, ErrInvalidOptions},
		{"negative capacity unit", []Node{ok}, Options{CapacityUnit: -1}, ErrInvalidOptions},
		{"negative max probes", []Node{ok}, Options{MaxProbes: -1}, ErrInvalidOptions},
		{"too many choices", []Node{ok}, Options{Choices: MaxChoices + 1}, ErrInvalidOptions},
		{"negative choices", []Node{ok}, Options{Choices: -1}, ErrInvalidOptions},
		{"bad scorer", []Node{ok}, Options{Scorer: constScorer{node: -1, weight: 1}}, ErrInvalidLoad},
		{"too many points", equalNodes(20), Options{PointsPerUnit: 1 << 24, MaxPointsPerNode: 1 << 24}, ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewSnapshot(tt.nodes, tt.opts)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// constScorer returns fixed values, for tests of scorer handling.
type constScorer struct{ node, weight float64 }

func (c constScorer) NodeLoad(*Node) float64              { return c.node }
func (c constScorer) StreamletWeight(ChannelLoad) float64 { return c.weight }

func TestNoAliveNodeReportsFalse(t *testing.T) {
	for _, nodes := range [][]Node{nil, {{ID: "a", Capacity: 1, State: Draining}, {ID: "b", Capacity: 2, State: Down}}} {
		s := mustSnapshot(t, nodes, Options{})
		if id, ok := s.Manager("x"); ok {
			t.Errorf("Manager = %q, want none", id)
		}
		if d, ok := s.Host("x", 1, ChannelLoad{}); ok {
			t.Errorf("Host = %+v, want none", d)
		}
		if _, ok := s.Place("x", 1, ChannelLoad{}); ok {
			t.Errorf("Place succeeded with no Alive node")
		}
	}
}

func TestHostRejectsBadWeight(t *testing.T) {
	for _, w := range []float64{-1, math.NaN(), math.Inf(1)} {
		s := mustSnapshot(t, equalNodes(3), Options{Scorer: constScorer{weight: w}})
		if d, ok := s.Host("x", 0, ChannelLoad{}); ok {
			t.Errorf("weight %v: Host = %+v, want false", w, d)
		}
	}
}

func TestDrainingAndDownNeverChosen(t *testing.T) {
	tests := []struct {
		name   string
		states []State
	}{
		{"one alive", []State{Draining, Alive, Down, Draining}},
		{"alive among many down", []State{Down, Down, Down, Alive, Down, Down}},
		{"half draining", []State{Alive, Draining, Alive, Draining, Alive, Draining}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := equalNodes(len(tt.states))
			for i, st := range tt.states {
				nodes[i].State = st
				// Draining and Down nodes look idle, so a load-only rule would pick them.
				if st == Alive {
					nodes[i].Load.Streamlets = 1000
				}
			}
			s := mustSnapshot(t, nodes, Options{})
			for c := 0; c < 500; c++ {
				ch := fmt.Sprintf("c%d", c)
				m, _ := s.Manager(ch)
				d, _ := s.Place(ch, uint64(c), ChannelLoad{MsgsPerSec: 100})
				for _, id := range []NodeID{m, d.Node} {
					i, _ := s.Index(id)
					if n, _ := s.Node(i); n.State != Alive {
						t.Fatalf("chose %q in state %v", id, n.State)
					}
				}
			}
		})
	}
}

func TestDefaultScorerWeights(t *testing.T) {
	sc := DefaultScorer()
	tests := []struct {
		name string
		ch   ChannelLoad
		want float64
	}{
		{"idle channel costs one streamlet", ChannelLoad{}, 10},
		{"messages in only", ChannelLoad{MsgsPerSec: 100}, 10 + 100},
		{"one subscriber doubles traffic", ChannelLoad{MsgsPerSec: 100, Subscribers: 1}, 10 + 200},
		{"bytes count per KiB", ChannelLoad{BytesPerSec: 1024, Subscribers: 1}, 10 + 2},
		{"fan-out capped at 8 read streams", ChannelLoad{MsgsPerSec: 10, Subscribers: 1000}, 10 + 90},
		{"rate capped at limit-msgs per window", ChannelLoad{MsgsPerSec: 1e6}, 10 + 5000},
		{"bytes capped at limit-size per window", ChannelLoad{BytesPerSec: 1e12}, 10 + 2048},
		{"big messages: limit-size binds first, messages scale down too",
			ChannelLoad{MsgsPerSec: 10000, BytesPerSec: 10000 * 4096}, 10 + (10000+10000*4)*(2048.0/(10000*4))},
		{"small messages: limit-msgs binds, bytes scale down too",
			ChannelLoad{MsgsPerSec: 10000, BytesPerSec: 10000 * 16}, 10 + (10000+10000*16.0/1024)/2},
		{"channel rule: smaller limit-msgs", ChannelLoad{MsgsPerSec: 1e6, LimitMsgs: 100}, 10 + 100},
		{"channel rule: larger limit-size", ChannelLoad{BytesPerSec: 1e12, LimitBytes: 4 << 20}, 10 + 4096},
		{"garbage counts as zero", ChannelLoad{MsgsPerSec: math.NaN(), BytesPerSec: -5, Subscribers: -3}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sc.StreamletWeight(tt.ch); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("weight = %v, want %v", got, tt.want)
			}
		})
	}
	n := Node{Capacity: 2, Load: NodeLoad{Streamlets: 3, MsgsInPerSec: 100, MsgsOutPerSec: 200,
		BytesInPerSec: 1024, BytesOutPerSec: 2048, Conns: 7, CPU: 0.5, Mem: 0.25}}
	want := 30.0 + 300 + 3 + 7 + (50000+25000)*2
	if got := sc.NodeLoad(&n); math.Abs(got-want) > 1e-9 {
		t.Fatalf("node load = %v, want %v", got, want)
	}
	noCap := DefaultScorer()
	noCap.Window = 0
	if got := noCap.StreamletWeight(ChannelLoad{MsgsPerSec: 1e6}); got != 10+1e6 {
		t.Fatalf("Window 0 must turn the cap off: weight = %v", got)
	}
}

// Behaviour 4: new streamlets go to the node with the best load score;
// changing either node load or channel load changes the choice.
func TestHostFollowsNodeAndChannelLoad(t *testing.T) {
	for _, choices := range []int{1, 2} {
		t.Run(fmt.Sprintf("choices=%d", choices), func(t *testing.T) {
			nodes := equalNodes(4)
			for i := range nodes {
				nodes[i].Load.MsgsInPerSec = 10000
			}
			s := mustSnapshot(t, nodes, Options{Choices: choices})
			const ch, seq = "orders", 7
			first, _ := s.Host(ch, seq, ChannelLoad{MsgsPerSec: 10})

			// Node load: make the chosen node heavy; the choice moves away.
			s2 := s.Clone()
			if err := s2.SetLoad(first.Node, NodeLoad{MsgsInPerSec: 40000}); err != nil {
				t.Fatal(err)
			}
			if d, _ := s2.Host(ch, seq, ChannelLoad{MsgsPerSec: 10}); d.Node == first.Node {
				t.Fatalf("node load ignored: still %q", d.Node)
			}
			// Channel load: a hot channel does not fit on a node that is
			// slightly above average, where a light one does.
			s3 := s.Clone()
			if err := s3.SetLoad(first.Node, NodeLoad{MsgsInPerSec: 11000}); err != nil {
				t.Fatal(err)
			}
			light, _ := s3.Host(ch, seq, ChannelLoad{MsgsPerSec: 10})
			if choices == 1 && light.Node != first.Node {
				t.Fatalf("light channel moved to %q", light.Node)
			}
			if d, _ := s3.Host(ch, seq, ChannelLoad{MsgsPerSec: 2000, Subscribers: 4}); d.Node == first.Node {
				t.Fatalf("channel load ignored: hot channel still on %q", d.Node)
			}
		})
	}
}

func TestTwoChoicesPrefersLessLoaded(t *testing.T) {
	// Every node fits; with Choices 2 the decision is the less loaded of
	// the first two distinct nodes on the walk, with Choices 1 the first.
	nodes := equalNodes(8)
	for i := range nodes {
		nodes[i].Load.MsgsInPerSec = float64(1000 + 10*i)
	}
	one := mustSnapshot(t, nodes, Options{Choices: 1})
	two := mustSnapshot(t, nodes, Options{Choices: 2})
	differ := 0
	for seq := uint64(0); seq < 200; seq++ {
		d1, _ := one.Host("c", seq, ChannelLoad{})
		d2, _ := two.Host("c", seq, ChannelLoad{})
		if d2.LoadAfter > d1.LoadAfter {
			t.Fatalf("seq %d: two choices took a more loaded node: %+v vs %+v", seq, d2, d1)
		}
		if d1.Node != d2.Node {
			differ++
		}
	}
	if differ < 50 {
		t.Fatalf("the second choice changed only %d of 200 decisions", differ)
	}
}

func TestHostBoundTable(t *testing.T) {
	// Two nodes, capacities 1 and 3, constant weight 1; epsilon 0.25.
	tests := []struct {
		name          string
		loadA, loadB  float64
		wantNode      NodeID
		wantOverflow  bool
		wantFallback  bool
		checkAnyStart bool
	}{
		// T=8, w=1: limits A=(1.25*9)/4=2.8125, B=8.4375. A at 1 fits (2),
		// B at 7 fits (8): the ring order decides, so only check the bound.
		{name: "both fit", loadA: 1, loadB: 7, checkAnyStart: true},
		// A at 3: 4 > 2.8125 -> must be B (B: 6 <= 8.4375).
		{name: "small node full", loadA: 3, loadB: 5, wantNode: "b"},
		// B at 8, A at 0: T=8, limits A=2.81, B=8.44; B+1=9 > 8.44 -> A.
		{name: "big node full", loadA: 0, loadB: 8, wantNode: "a"},
		// Empty cluster: T=0,w=1: limits A=0.3125, B=0.9375; nobody fits.
		// Ratios after: A 1/1, B 1/3 -> B, overflow.
		{name: "empty cluster overflows to least relative load", wantNode: "b", wantOverflow: true, wantFallback: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := []Node{{ID: "a", Capacity: 1, State: Alive}, {ID: "b", Capacity: 3, State: Alive}}
			s := mustSnapshot(t, nodes, Options{Scorer: constScorer{weight: 1}})
			if err := s.AddLoad("a", tt.loadA); err != nil {
				t.Fatal(err)
			}
			if err := s.AddLoad("b", tt.loadB); err != nil {
				t.Fatal(err)
			}
			for seq := uint64(0); seq < 50; seq++ {
				d, ok := s.Host("ch", seq, ChannelLoad{})
				if !ok {
					t.Fatal("no decision")
				}
				if !tt.checkAnyStart && d.Node != tt.wantNode {
					t.Fatalf("seq %d: node %q, want %q", seq, d.Node, tt.wantNode)
				}
				if d.Overflow != tt.wantOverflow || d.Fallback != tt.wantFallback {
					t.Fatalf("seq %d: %+v", seq, d)
				}
				if !d.Overflow && d.LoadAfter > d.Limit {
					t.Fatalf("seq %d: bound exceeded: %+v", seq, d)
				}
			}
		})
	}
}

func TestCapacityWeighting(t *testing.T) {
	// Nodes of capacity 1, 2 and 4 fed many equal streamlets end up with
	// loads near their capacity shares, and never above (1+e) x share.
	nodes := []Node{{ID: "s", Capacity: 1, State: Alive}, {ID: "m", Capacity: 2, State: Alive}, {ID: "l", Capacity: 4, State: Alive}}
	s := mustSnapshot(t, nodes, Options{Epsilon: 0.1, Scorer: constScorer{weight: 1}})
	for i := 0; i < 7000; i++ {
		d, _ := s.Place(fmt.Sprintf("c%d", i%100), uint64(i), ChannelLoad{})
		if i > 100 && d.Overflow {
			t.Fatalf("overflow at %d: %+v", i, d)
		}
	}
	for _, n := range nodes {
		l, _ := s.Load(n.ID)
		share := 7000 * n.Capacity / 7
		if l > 1.1*share+1 || l < 0.7*share {
			t.Errorf("node %s: load %v, share %v", n.ID, l, share)
		}
	}
}

func TestCommitAddLoadSetLoad(t *testing.T) {
	s := mustSnapshot(t, equalNodes(3), Options{Scorer: constScorer{weight: 2}})
	d, _ := s.Host("c", 0, ChannelLoad{})
	if err := s.Commit(d); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.Load(d.Node); l != 2 {
		t.Fatalf("load after commit = %v", l)
	}
	if tl, c := s.Total(); tl != 2 || c != 3 {
		t.Fatalf("Total = %v, %v", tl, c)
	}
	if err := s.AddLoad(d.Node, -5); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.Load(d.Node); l != 0 {
		t.Fatalf("load must clamp at 0, got %v", l)
	}
	if tl, _ := s.Total(); tl != 0 {
		t.Fatalf("total after clamp = %v", tl)
	}
	other := mustSnapshot(t, []Node{{ID: "zz", Capacity: 1, State: Alive}}, Options{})
	od, _ := other.Host("c", 0, ChannelLoad{})
	if err := s.Commit(od); !errors.Is(err, ErrStaleDecision) {
		t.Fatalf("foreign decision: err = %v", err)
	}
	if err := s.AddLoad("nope", 1); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("unknown node: err = %v", err)
	}
	if err := s.AddLoad(d.Node, math.NaN()); !errors.Is(err, ErrInvalidLoad) {
		t.Fatalf("NaN delta: err = %v", err)
	}
	if err := s.SetLoad("nope", NodeLoad{}); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("SetLoad unknown: err = %v", err)
	}
	if err := s.SetLoad(d.Node, NodeLoad{CPU: 2}); !errors.Is(err, ErrInvalidNode) {
		t.Fatalf("SetLoad bad: err = %v", err)
	}
	// SetLoad with the default scorer replaces the node's load.
	s2 := mustSnapshot(t, equalNodes(2), Options{})
	if err := s2.SetLoad("n000", NodeLoad{MsgsInPerSec: 500}); err != nil {
		t.Fatal(err)
	}
	if l, _ := s2.Load("n000"); l != 500 {
		t.Fatalf("SetLoad: load = %v", l)
	}
	if tl, _ := s2.Total(); tl != 500 {
		t.Fatalf("SetLoad: total = %v", tl)
	}
	// A Draining node's load is tracked but left out of T.
	nodes := equalNodes(2)
	nodes[1].State = Draining
	s3 := mustSnapshot(t, nodes, Options{})
	if err := s3.AddLoad("n001", 100); err != nil {
		t.Fatal(err)
	}
	if tl, c := s3.Total(); tl != 0 || c != 1 {
		t.Fatalf("draining counted: T=%v C=%v", tl, c)
	}
}

func TestCloneIsIndependent(t *testing.T) {
	s := mustSnapshot(t, equalNodes(5), Options{})
	c := s.Clone()
	c.Place("x", 0, ChannelLoad{MsgsPerSec: 1000})
	if tl, _ := s.Total(); tl != 0 {
		t.Fatalf("clone changed the original: T = %v", tl)
	}
	if tl, _ := c.Total(); tl == 0 {
		t.Fatal("clone did not change")
	}
}

func TestOptionsDefaults(t *testing.T) {
	s := mustSnapshot(t, nil, Options{})
	o := s.Options()
	if o.Epsilon != DefaultEpsilon || o.PointsPerUnit != DefaultPointsPerUnit || o.CapacityUnit != 1 ||
		o.MaxPointsPerNode != DefaultMaxPointsPerNode || o.MaxProbes != DefaultMaxProbes || o.Scorer == nil ||
		o.Choices != DefaultChoices {
		t.Fatalf("defaults not applied: %+v", o)
	}
	for _, tt := range []struct {
		c    float64
		want int
	}{{1, 100}, {2.5, 250}, {0.001, 1}, {1e9, 1000}} {
		if got := numPoints(tt.c, &o); got != tt.want {
			t.Errorf("numPoints(%v) = %d, want %d", tt.c, got, tt.want)
		}
	}
}

func TestStateString(t *testing.T) {
	if State(0) != Alive {
		t.Fatal("the zero State must be Alive")
	}
	for st, want := range map[State]string{Alive: "alive", Draining: "draining", Down: "down", 7: "state(7)"} {
		if st.String() != want {
			t.Errorf("%d: %q", st, st.String())
		}
	}
}

func TestManagerMovesAboutOneNth(t *testing.T) {
	for _, n := range []int{10, 100} {
		before := mustSnapshot(t, equalNodes(n), Options{})
		after := mustSnapshot(t, equalNodes(n+1), Options{})
		const channels = 50000
		moved := 0
		for c := 0; c < channels; c++ {
			ch := fmt.Sprintf("channel-%d", c)
			a, _ := before.Manager(ch)
			b, _ := after.Manager(ch)
			if a != b {
				moved++
				if b != NodeID(fmt.Sprintf("n%03d", n)) {
					t.Fatalf("channel %s moved from %s to %s, not to the new node", ch, a, b)
				}
			}
		}
		frac, want := float64(moved)/channels, 1/float64(n+1)
		if frac > 1.5*want || frac < 0.5*want {
			t.Errorf("n=%d: moved %.4f of channels, want about %.4f", n, frac, want)
		}
	}
}

func TestHotChannelSpreads(t *testing.T) {
	s := mustSnapshot(t, equalNodes(20), Options{})
	seen := map[NodeID]int{}
	for seq := uint64(0); seq < 200; seq++ {
		d, _ := s.Place("hot", seq, ChannelLoad{MsgsPerSec: 50000, Subscribers: 100})
		seen[d.Node]++
	}
	if len(seen) < 18 {
		t.Fatalf("200 successive streamlets used only %d of 20 nodes", len(seen))
	}
	for id, k := range seen {
		if k > 25 {
			t.Errorf("node %s took %d of 200 streamlets", id, k)
		}
	}
	// Without any load feedback (Host only, nodes far from the bound), the
	// sequence number alone must spread the streamlets.
	nodes := equalNodes(20)
	for i := range nodes {
		nodes[i].Load.MsgsInPerSec = 1e6
	}
	idle := mustSnapshot(t, nodes, Options{Choices: 1})
	clear(seen)
	for seq := uint64(0); seq < 200; seq++ {
		d, _ := idle.Host("hot", seq, ChannelLoad{MsgsPerSec: 50000, Subscribers: 100})
		seen[d.Node]++
	}
	if len(seen) < 18 {
		t.Fatalf("Host alone: 200 successive streamlets used only %d of 20 nodes", len(seen))
	}
}

func TestManagerMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 30; round++ {
		s := mustSnapshot(t, randNodes(r, 1+r.IntN(30)), Options{PointsPerUnit: 1 + r.IntN(60)})
		for c := 0; c < 200; c++ {
			ch := fmt.Sprintf("c-%d-%d", round, c)
			got, gok := s.Manager(ch)
			want, wok := refManager(s, ch)
			if got != want || gok != wok {
				t.Fatalf("round %d %s: Manager %q %v, reference %q %v", round, ch, got, gok, want, wok)
			}
		}
	}
}

func TestHostMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 40; round++ {
		o := Options{PointsPerUnit: 1 + r.IntN(40), MaxProbes: 1 + r.IntN(50), Epsilon: 0.01 + r.Float64(), Choices: 1 + r.IntN(MaxChoices)}
		s := mustSnapshot(t, randNodes(r, 1+r.IntN(25)), o)
		for c := 0; c < 200; c++ {
			ch, cl := randChannel(r)
			seq := r.Uint64()
			d, ok := s.Host(ch, seq, cl)
			want, wok, wover := refHost(s, ch, seq, cl)
			if d.Node != want || ok != wok || d.Overflow != wover {
				t.Fatalf("round %d: Host %+v %v, reference %q %v overflow %v", round, d, ok, want, wok, wover)
			}
		}
	}
}

func TestBoundNeverExceededProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 40; round++ {
		nodes := randNodes(r, 1+r.IntN(40))
		s := mustSnapshot(t, nodes, Options{Epsilon: 0.05 + r.Float64()*0.5})
		var placed []Decision
		for step := 0; step < 2000; step++ {
			if len(placed) > 0 && r.IntN(3) == 0 { // a streamlet closes
				k := r.IntN(len(placed))
				if err := s.AddLoad(placed[k].Node, -placed[k].Weight); err != nil {
					t.Fatal(err)
				}
				placed[k] = placed[len(placed)-1]
				placed = placed[:len(placed)-1]
				continue
			}
			ch, cl := randChannel(r)
			d, ok := s.Place(ch, uint64(step), cl)
			if !ok {
				if _, c := freshTotals(s); c != 0 {
					t.Fatal("no decision with Alive nodes")
				}
				break
			}
			checkDecision(t, s, d)
			placed = append(placed, d)
		}
	}
}

// checkDecision checks a decision already committed to s: the node is Alive,
// and the bound holds unless no node could have taken it.
func checkDecision(t *testing.T, s *Snapshot, d Decision) {
	t.Helper()
	n, l := s.Node(d.Index)
	if n.ID != d.Node || n.State != Alive {
		t.Fatalf("decision %+v names node %+v", d, n)
	}
	tl, c := freshTotals(s) // after the commit: T includes w
	limit := (1 + s.opts.Epsilon) * tl * n.Capacity / c
	if !d.Overflow {
		if l > limit*(1+1e-12) {
			t.Fatalf("bound exceeded: load %v > limit %v (%+v)", l, limit, d)
		}
		return
	}
	// Overflow: nobody fit before the commit, and the streamlet weighs more
	// than e times the smallest node's fair share.
	cmin := math.Inf(1)
	for i := 0; i < s.Len(); i++ {
		if m, _ := s.Node(i); m.State == Alive {
			cmin = math.Min(cmin, m.Capacity)
		}
	}
	if d.Weight <= s.opts.Epsilon*(tl-d.Weight)*cmin/c*(1-1e-6) {
		t.Fatalf("overflow with a light streamlet: w=%v T=%v Cmin=%v C=%v (%+v)", d.Weight, tl-d.Weight, cmin, c, d)
	}
	for i := 0; i < s.Len(); i++ {
		m, ml := s.Node(i)
		if m.State != Alive {
			continue
		}
		before := ml
		if i == d.Index {
			before -= d.Weight
		}
		if before+d.Weight <= (1+s.opts.Epsilon)*tl*m.Capacity/c*(1-2*margin) {
			t.Fatalf("overflow although node %s fits (%+v)", m.ID, d)
		}
	}
}

func TestSameSnapshotSameDecision(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for round := 0; round < 20; round++ {
		nodes := randNodes(r, 1+r.IntN(50))
		a := mustSnapshot(t, nodes, Options{})
		perm := append([]Node(nil), nodes...)
		r.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		b := mustSnapshot(t, perm, Options{})
		for c := 0; c < 300; c++ {
			ch, cl := randChannel(r)
			seq := uint64(c)
			da, _ := a.Place(ch, seq, cl)
			db, _ := b.Place(ch, seq, cl)
			again, _ := a.Clone().Host(ch, seq+1, cl)
			again2, _ := a.Clone().Host(ch, seq+1, cl)
			if da != db || again != again2 {
				t.Fatalf("decisions differ: %+v vs %+v", da, db)
			}
			ma, _ := a.Manager(ch)
			mb, _ := b.Manager(ch)
			if ma != mb {
				t.Fatalf("managers differ: %q vs %q", ma, mb)
			}
		}
	}
}

func TestTotalStaysExactOverManyAdjustments(t *testing.T) {
	s := mustSnapshot(t, equalNodes(10), Options{})
	r := rand.New(rand.NewPCG(9, 10))
	for i := 0; i < 3*resumEvery+17; i++ {
		id := NodeID(fmt.Sprintf("n%03d", r.IntN(10)))
		if err := s.AddLoad(id, (r.Float64()-0.4)*1e6); err != nil {
			t.Fatal(err)
		}
	}
	tl, _ := s.Total()
	fresh, _ := freshTotals(s)
	if math.Abs(tl-fresh) > 1e-6*math.Max(1, fresh) {
		t.Fatalf("T drifted: %v vs %v", tl, fresh)
	}
}

func TestConcurrentReadsAgree(t *testing.T) {
	s := mustSnapshot(t, randNodes(rand.New(rand.NewPCG(11, 12)), 30), Options{})
	const calls = 2000
	want := make([]Decision, calls)
	wantM := make([]NodeID, calls)
	for i := range want {
		want[i], _ = s.Host(fmt.Sprintf("c%d", i), uint64(i), ChannelLoad{MsgsPerSec: float64(i)})
		wantM[i], _ = s.Manager(fmt.Sprintf("c%d", i))
	}
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func() {
			for i := 0; i < calls; i++ {
				d, _ := s.Host(fmt.Sprintf("c%d", i), uint64(i), ChannelLoad{MsgsPerSec: float64(i)})
				m, _ := s.Manager(fmt.Sprintf("c%d", i))
				if d != want[i] || m != wantM[i] {
					errs <- fmt.Errorf("call %d: %+v %q, want %+v %q", i, d, m, want[i], wantM[i])
					return
				}
			}
			errs <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestGrowingLoadsStayWithinBoundEverywhere(t *testing.T) {
	// Balanced start, streamlets light enough (w <= e*T*Cmin/C) that no
	// overflow can happen: after every Place, every Alive node is within
	// (1+e) x its share of the current total, not only the chosen one.
	r := rand.New(rand.NewPCG(13, 14))
	nodes := randNodes(r, 25)
	for i := range nodes {
		nodes[i].Load = NodeLoad{}
	}
	s := mustSnapshot(t, nodes, Options{Scorer: constScorer{weight: 1}})
	for i := 0; i < s.Len(); i++ {
		n, _ := s.Node(i)
		if err := s.AddLoad(n.ID, 1000*n.Capacity); err != nil {
			t.Fatal(err)
		}
	}
	for step := 0; step < 20000; step++ {
		d, ok := s.Place(fmt.Sprintf("c%d", r.IntN(500)), uint64(step), ChannelLoad{})
		if !ok || d.Overflow {
			t.Fatalf("step %d: %+v %v", step, d, ok)
		}
		if step%97 != 0 {
			continue
		}
		tl, c := freshTotals(s)
		for i := 0; i < s.Len(); i++ {
			if n, l := s.Node(i); n.State == Alive && l > (1+s.opts.Epsilon)*tl*n.Capacity/c {
				t.Fatalf("step %d: node %s at %v above (1+e) x share %v", step, n.ID, l, tl*n.Capacity/c)
			}
		}
	}
}
