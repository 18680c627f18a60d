package metalog

import (
	"cmp"
	"slices"
	"time"
)

// The pure decisions of the Raft log, apart from raft and the network, so
// that they are table-tested: whether to bootstrap a cluster, and how the
// leader changes the configuration to follow the membership (in the manner
// of Consul's autopilot).

// Member is one node as the cluster's membership (gossip) sees it; the
// cluster passes them to Raft.SetMembers. Its Raft fields come from the
// node's Advert.
type Member struct {
	Name         string
	Addr         string // its Raft transport address; "" if it advertises none
	ServerID     string // its server id; "" if it advertises none (no Raft yet)
	Bootstrapped bool   // it belongs to a cluster that has state
	Alive        bool   // the failure detector counts it alive (suspect included)
	Left         bool   // it left the cluster on purpose
	Draining     bool   // it is draining before it goes
	// Since is when the member entered its current state (alive, dead or
	// left); zero if unknown, then the log uses the time it first saw the
	// member in that state.
	Since time.Time
}

// Advert is what a node gossips about its Raft side (Raft.Advert), to be
// passed back, as it is, in the Member fields of the same names.
type Advert struct {
	ServerID     string // node name, '@', 16 hex digits (identity.go)
	Addr         string // Raft address: host:port, '/', server id
	Bootstrapped bool   // it has Raft state: it bootstrapped or was added
}

// shouldBootstrap reports whether self, a node with an empty log, starts a
// new cluster: when no member advertises one (alive or dead, as long as it
// did not leave), and self is the smallest-named of at least expect live,
// not draining members with empty logs. members may include self.
//
// The race this leaves, as Consul's bootstrap-expect does: the rule trusts
// the membership view. Nodes that cannot see each other when they start
// (a gossip partition at bootstrap time, or expect smaller than the group
// started at once, whose members do not yet see each other) can each see
// expect empty members and each start a cluster. Once gossip joins them,
// each leader adds the other cluster's members as non-voters (nothing in
// an Advert says which cluster a node belongs to), the two fight over those
// nodes, and one cluster's entries are lost. Set expect to the number of
// nodes started together, and start them with a working network.
func shouldBootstrap(self Member, members []Member, expect int) bool {
	if self.Bootstrapped || self.ServerID == "" {
		return false
	}
	expect = max(expect, 1)
	count, smallest := 0, ""
	consider := func(m Member) bool {
		if m.Bootstrapped && !m.Left {
			return false
		}
		if m.Alive && !m.Left && !m.Draining && m.ServerID != "" {
			count++
			if smallest == "" || m.Name < smallest {
				smallest = m.Name
			}
		}
		return true
	}
	if !consider(self) {
		return false
	}
	for _, m := range members {
		if m.Name == self.Name {
			continue
		}
		if !consider(m) {
			return false
		}
	}
	return count >= expect && smallest == self.Name
}

// bootstrapVoters returns the voters of a new cluster that self
// bootstraps (shouldBootstrap said so): the members it counted (alive, not
// draining, with an empty log and a Raft address), smallest names first,
// as many as votersFor allows, self always among them. So a cluster
// started with bootstrap-expect 3 has three voters from its first entry,
// as Consul's bootstrap-expect does, and survives the loss of any one at
// once, instead of one voter until the others were promoted (a leader
// killed in its first seconds stopped the whole cluster).
func bootstrapVoters(self Member, members []Member, maxVoters int) []cfgServer {
	var cands []Member
	for _, m := range members {
		if m.Name != self.Name && m.Alive && !m.Left && !m.Draining && !m.Bootstrapped && m.ServerID != "" && m.Addr != "" {
			cands = append(cands, m)
		}
	}
	slices.SortFunc(cands, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	out := []cfgServer{{ID: self.ServerID, Addr: self.Addr, Voter: true}}
	for _, m := range cands {
		if len(out) >= votersFor(len(cands)+1, maxVoters) {
			break
		}
		out = append(out, cfgServer{ID: m.ServerID, Addr: m.Addr, Voter: true})
	}
	return out
}

// votersFor returns the number of voters for n members able to vote: the
// largest odd number <= min(n, limit), and at least 1.
func votersFor(n, limit int) int {
	v := min(n, limit)
	if v%2 == 0 {
		v--
	}
	return max(v, 1)
}

// cfgServer is a server of the Raft configuration.
type cfgServer struct {
	ID, Addr string
	Voter    bool
}

// peerState is the leader's view of a follower.
type peerState struct {
	Reachable     bool      // it answered recently
	CaughtUpSince time.Time // since when its log is close to the leader's; zero if not now
}

// planInput is what a reconcile round decides from.
type planInput struct {
	Self        string // the leader's server id
	Now         time.Time
	Servers     []cfgServer       // the latest configuration
	Members     map[string]Member // by name; every configured node present (the loop fills absent ones in as dead)
	Peers       map[string]peerState
	DeadAfter   time.Duration // a member dead this long loses its place
	StableAfter time.Duration // a non-voter caught up this long may be promoted
	MaxVoters   int
}

// changeKind is a configuration change.
type changeKind uint8

const (
	addNonvoter changeKind = iota + 1 // a new server
	promote                           // a non-voter becomes a voter
	demote                            // a voter becomes a non-voter
	remove                            // a server leaves the configuration
	transfer                          // the leader hands its leadership over (it is draining)
)

func (k changeKind) String() string {
	return [...]string{"?", "add non-voter", "promote", "demote", "remove", "transfer leadership"}[k]
}

// change is one step of a plan, applied in order.
type change struct {
	Kind   changeKind
	ID     string
	Addr   string
	Reason string
}

// serverFate is what a round decides for one configured server.
type serverFate uint8

const (
	keepServer serverFate = iota
	replaced              // its node came back as another server (lost its directory)
	left                  // its node left
	dead                  // its node is dead past DeadAfter
	draining              // its node drains (voters are demoted; non-voters stay)
)

var fateReason = [...]string{"", "its node came back as a new server", "its node left", "its node is dead", "its node is draining"}

// fate classifies a configured server other than the leader. A server the
// leader still reaches is not dead, whatever the membership says.
func (in *planInput) fate(s cfgServer) serverFate {
	m, ok := in.Members[nodeOf(s.ID)]
	switch {
	case !ok:
		return keepServer // unknown: nothing to go on
	case m.ServerID != "" && m.ServerID != s.ID:
		return replaced
	case m.Left:
		return left
	case !m.Alive && in.Now.Sub(m.Since) >= in.DeadAfter && !in.Peers[s.ID].Reachable:
		return dead // dead for the membership, and silent to the leader
	case m.Draining:
		return draining
	}
	return keepServer
}

// plan returns the configuration changes that make the configuration follow
// the membership, in the order to apply them: promotions first (so a
// replaced voter's successor votes before it goes), then voter removals and
// demotions, non-voter removals, additions. A server keeps the address it
// was added with: dials go to the address its node advertises now (the
// transport's addressBook), so a node restarted on another port needs no
// change (and hashicorp raft v1.8.0 races when one changes a peer's
// address: hashicorp/raft#681). A leader that
// drains plans only the transfer of its leadership to a caught-up voter
// (nothing while there is none).
//
// The rules: voters are the largest odd number <= min(members able to vote,
// MaxVoters), where members able to vote are the live, not draining members
// that advertise a server id, plus voters dead for less than DeadAfter (who
// keep their seat meanwhile). A server whose node left, is dead past
// DeadAfter, or came back under a new server id is removed; a draining
// voter is demoted. Non-voters are promoted, by node name, once reachable
// and caught up for StableAfter, and only so many that the voters end odd.
// Excess voters are demoted (the dead ones first, then by descending name).
// Never the leader itself. A round removes or demotes at most a minority of
// the current voters ((voters-1)/2) among those the leader cannot reach:
// if more seem dead the membership view is wrong (the leader commits, so a
// majority answers it); the rest wait for a later round.
func plan(in planInput) []change {
	var out []change
	if m, ok := in.Members[nodeOf(in.Self)]; ok && m.Draining {
		if t, ok := in.transferTarget(); ok {
			return []change{{Kind: transfer, ID: t.ID, Addr: t.Addr, Reason: "this node is draining"}}
		}
		return nil // wait for a voter to hand over to; change nothing meanwhile
	}
	cfg := make(map[string]bool, len(in.Servers))
	voters := 0
	for _, s := range in.Servers {
		cfg[s.ID] = true
		if s.Voter {
			voters++
		}
	}
	budget := (voters - 1) / 2 // unreachable voters a round may drop
	var keepVoters, graceVoters, eligible []cfgServer
	var dropVoters, dropOthers []change
	for _, s := range in.Servers {
		if s.ID == in.Self {
			keepVoters = append(keepVoters, s)
			continue
		}
		f := in.fate(s)
		if f == draining && !s.Voter {
			f = keepServer
		}
		if f != keepServer && s.Voter && !in.Peers[s.ID].Reachable {
			if budget == 0 {
				f = keepServer // wait for a later round
			} else {
				budget--
			}
		}
		switch {
		case f == keepServer && s.Voter:
			keepVoters = append(keepVoters, s)
			if m := in.Members[nodeOf(s.ID)]; !m.Alive {
				graceVoters = append(graceVoters, s)
			}
		case f == keepServer:
			if in.promotable(s) {
				eligible = append(eligible, s)
			}
		case f == draining:
			dropVoters = append(dropVoters, change{Kind: demote, ID: s.ID, Reason: fateReason[f]})
		case s.Voter:
			dropVoters = append(dropVoters, change{Kind: remove, ID: s.ID, Reason: fateReason[f]})
		default:
			dropOthers = append(dropOthers, change{Kind: remove, ID: s.ID, Reason: fateReason[f]})
		}
	}
	want := votersFor(in.ableToVote(len(graceVoters)), in.MaxVoters)
	switch {
	case len(keepVoters) < want:
		slices.SortFunc(eligible, byNode)
		n := min(want-len(keepVoters), len(eligible))
		if (len(keepVoters)+n)%2 == 0 && n > 0 {
			n-- // end odd: an even count tolerates no more failures and needs more answers
		}
		for _, s := range eligible[:n] {
			out = append(out, change{Kind: promote, ID: s.ID, Addr: s.Addr, Reason: "caught up, and voters are missing"})
		}
	case len(keepVoters) > want:
		dropVoters = append(dropVoters, in.excess(keepVoters, graceVoters, len(keepVoters)-want, &budget)...)
	}
	out = append(out, dropVoters...)
	out = append(out, dropOthers...)
	return append(out, in.additions(cfg)...)
}

// ableToVote counts the members able to vote: live, not draining members
// that advertise a server id, plus grace voters dead within DeadAfter.
func (in *planInput) ableToVote(grace int) int {
	n := grace
	for _, m := range in.Members {
		if m.Alive && !m.Left && !m.Draining && m.ServerID != "" {
			n++
		}
	}
	return n
}

// promotable reports whether non-voter s may become a voter now.
func (in *planInput) promotable(s cfgServer) bool {
	m := in.Members[nodeOf(s.ID)]
	p := in.Peers[s.ID]
	return m.Alive && !m.Left && !m.Draining && m.ServerID == s.ID && p.Reachable &&
		!p.CaughtUpSince.IsZero() && in.Now.Sub(p.CaughtUpSince) >= in.StableAfter
}

// excess returns the demotions of n voters beyond the wanted count: the
// dead ones first (in name order), then the others by descending name,
// never the leader, unreachable ones within budget.
func (in *planInput) excess(keep, grace []cfgServer, n int, budget *int) []change {
	order := slices.Clone(grace)
	slices.SortFunc(order, byNode)
	rest := make([]cfgServer, 0, len(keep))
	for _, s := range keep {
		if s.ID != in.Self && !slices.Contains(grace, s) {
			rest = append(rest, s)
		}
	}
	slices.SortFunc(rest, func(a, b cfgServer) int { return byNode(b, a) })
	order = append(order, rest...)
	var out []change
	for _, s := range order {
		if len(out) == n {
			break
		}
		if !in.Peers[s.ID].Reachable {
			if *budget == 0 {
				continue
			}
			*budget--
		}
		out = append(out, change{Kind: demote, ID: s.ID, Reason: "more voters than members call for"})
	}
	return out
}

// additions returns the live, not draining members whose server is not in
// the configuration, as non-voters, by name.
func (in *planInput) additions(cfg map[string]bool) []change {
	var out []change
	for _, m := range in.Members {
		if m.Alive && !m.Left && !m.Draining && m.ServerID != "" && m.Addr != "" && !cfg[m.ServerID] && m.ServerID != in.Self {
			out = append(out, change{Kind: addNonvoter, ID: m.ServerID, Addr: m.Addr, Reason: "a new member"})
		}
	}
	slices.SortFunc(out, func(a, b change) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// transferTarget returns a voter the draining leader can hand over to: a
// reachable, caught-up voter whose node is live and not draining.
func (in *planInput) transferTarget() (cfgServer, bool) {
	var best []cfgServer
	for _, s := range in.Servers {
		m := in.Members[nodeOf(s.ID)]
		p := in.Peers[s.ID]
		if s.Voter && s.ID != in.Self && m.Alive && !m.Draining && !m.Left && p.Reachable && !p.CaughtUpSince.IsZero() {
			best = append(best, s)
		}
	}
	if len(best) == 0 {
		return cfgServer{}, false
	}
	slices.SortFunc(best, byNode)
	return best[0], true
}

func byNode(a, b cfgServer) int {
	return cmp.Or(cmp.Compare(nodeOf(a.ID), nodeOf(b.ID)), cmp.Compare(a.ID, b.ID))
}

// peerStates turns what the leader saw from its followers into their
// states: reachable if one answered within stale of now, caught up if its
// log was within maxLag entries of commit. since holds when each became
// caught up (kept across rounds); the result's next replaces it.
func peerStates(seen map[string]peerSeen, since map[string]time.Time, now time.Time, commit, maxLag uint64, stale time.Duration) (states map[string]peerState, next map[string]time.Time) {
	states = make(map[string]peerState, len(seen))
	next = make(map[string]time.Time, len(seen))
	for id, s := range seen {
		st := peerState{Reachable: now.Sub(s.at) <= stale}
		if st.Reachable && s.lastLog+maxLag >= commit {
			st.CaughtUpSince = now
			if t, ok := since[id]; ok {
				st.CaughtUpSince = t
			}
			next[id] = st.CaughtUpSince
		}
		states[id] = st
	}
	return states, next
}

// memberClock fills in the Since of members that came without one, and
// stands in for configured nodes the membership no longer lists (as dead
// since the round that first missed them), so that the DeadAfter bound
// applies to both. It is kept across rounds by the reconcile loop.
type memberClock struct {
	seen map[string]clockEntry // by node name
}

type clockEntry struct {
	state uint8 // 1 alive, 2 dead, 3 left, 4 absent
	since time.Time
}

func memberState(m Member) uint8 {
	switch {
	case m.Left:
		return 3
	case m.Alive:
		return 1
	}
	return 2
}

// fill returns the members by name, with Since filled in and the
// configured nodes that are missing added as dead.
func (c *memberClock) fill(members []Member, servers []cfgServer, now time.Time) map[string]Member {
	if c.seen == nil {
		c.seen = make(map[string]clockEntry)
	}
	out := make(map[string]Member, len(members))
	next := make(map[string]clockEntry, len(members))
	stamp := func(name string, state uint8, since time.Time) time.Time {
		e, ok := c.seen[name]
		if !ok || e.state != state {
			e = clockEntry{state: state, since: now}
		}
		if !since.IsZero() {
			e.since = since
		}
		next[name] = e
		return e.since
	}
	for _, m := range members {
		if _, dup := out[m.Name]; dup || m.Name == "" {
			continue
		}
		m.Since = stamp(m.Name, memberState(m), m.Since)
		out[m.Name] = m
	}
	for _, s := range servers {
		name := nodeOf(s.ID)
		if _, ok := out[name]; !ok {
			out[name] = Member{Name: name, Since: stamp(name, 4, time.Time{})}
		}
	}
	c.seen = next
	return out
}
