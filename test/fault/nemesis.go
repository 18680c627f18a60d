package fault

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"
)

// The nemesis's pure parts besides the schedule and the log model: the
// faults as they were applied (Window), the deadline of each
// acknowledgement, the Raft roles in a node's status, and the tally of a
// run with its verdict.

// Window is one fault as the run applied it: from when it struck to when
// it was healed (wall clock), and what it hit.
type Window struct {
	Fault       Fault
	Target      string // the nodes it hit, as applied ("c", "a <-> b")
	Note        string // how a runtime target was chosen, when it matters
	From, Until time.Time
}

func (w Window) String() string {
	s := fmt.Sprintf("#%d %v %s", w.Fault.Seq, w.Fault.Kind, w.Target)
	if w.Note != "" {
		s += " (" + w.Note + ")"
	}
	return s
}

// Deadline returns the deadline of an acknowledgement at acked: bound
// after it, or, when a fault is active then or strikes before that
// deadline, bound after that fault's heal (repeatedly: a fault that
// strikes before the extended deadline extends it again). The promise
// under test: every acknowledged message reaches every live subscriber
// (or, N = 1 only, a GAP lost covers it) within bound of its ack or of
// the heal of the faults it met. ws are in any order.
func Deadline(ws []Window, bound time.Duration) func(acked time.Time) time.Time {
	sorted := append([]Window(nil), ws...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].From.Before(sorted[j].From) })
	return func(acked time.Time) time.Time {
		d := acked
		for _, w := range sorted {
			if w.From.After(d.Add(bound)) {
				break
			}
			if w.Until.After(d) {
				d = w.Until
			}
		}
		return d.Add(bound)
	}
}

// Context places t among the faults: "during #4 isolate c (+52.5s..+61.0s)",
// "3.2s after #4 isolate c was healed", or "before any fault"; times count
// from start.
func Context(ws []Window, t, start time.Time) string {
	if t.IsZero() {
		return "unacknowledged"
	}
	rel := func(x time.Time) string { return fmt.Sprintf("+%.1fs", x.Sub(start).Seconds()) }
	var during []string
	var before *Window
	for i := range ws {
		w := &ws[i]
		if !t.Before(w.From) && !t.After(w.Until) {
			during = append(during, fmt.Sprintf("%v (%s..%s)", w, rel(w.From), rel(w.Until)))
		}
		if w.Until.Before(t) && (before == nil || w.Until.After(before.Until)) {
			before = w
		}
	}
	switch {
	case len(during) > 0:
		return "at " + rel(t) + ", during " + strings.Join(during, " and ")
	case before != nil:
		return fmt.Sprintf("at %s, %.1fs after %v was healed", rel(t), t.Sub(before.Until).Seconds(), before)
	}
	return "at " + rel(t) + ", before any fault"
}

// RaftRoles reads the Raft leader and voters from the JSON of `sluice
// cluster status --json`, as indexes into names (the nodes' names). It
// understands, at the top level or in an object one level down (such as
// "raft": {...}): "leader": "NAME" and "voters": ["NAME", ...] (or objects
// with "name", "node" or "id"); and members with "leader": true, "voter":
// true, or a "raft"/"role"/"raft_role" of "leader", "voter" or
// "follower". A name may be a Raft server id that starts with the node's
// name followed by a separator ("b-3f9c..."). ok is false when the status
// names no leader and no voter (a binary without Raft).
func RaftRoles(raw []byte, names []string) (leader int, voters []int, ok bool) {
	var top map[string]any
	if json.Unmarshal(raw, &top) != nil {
		return -1, nil, false
	}
	leader = -1
	addVoter := func(v any) {
		if i := nodeIndex(idOf(v), names); i >= 0 && !containsInt(voters, i) {
			voters = append(voters, i)
		}
	}
	scan := func(obj map[string]any) {
		for k, v := range obj {
			switch strings.ToLower(k) {
			case "leader", "raft_leader", "leader_id":
				if s, isStr := v.(string); isStr && leader < 0 {
					leader = nodeIndex(s, names)
				}
			case "voters":
				if list, isList := v.([]any); isList {
					for _, x := range list {
						addVoter(x)
					}
				}
			}
		}
	}
	scan(top)
	for _, v := range top {
		if obj, isObj := v.(map[string]any); isObj {
			scan(obj)
		}
	}
	members, _ := top["members"].([]any)
	for _, m := range members {
		obj, isObj := m.(map[string]any)
		if !isObj {
			continue
		}
		role := ""
		for _, k := range []string{"raft", "role", "raft_role"} {
			if s, isStr := obj[k].(string); isStr {
				role = strings.ToLower(s)
			}
		}
		isLeader := obj["leader"] == true || role == "leader"
		if isLeader && leader < 0 {
			leader = nodeIndex(idOf(obj), names)
		}
		if isLeader || obj["voter"] == true || role == "voter" || role == "follower" {
			addVoter(obj)
		}
	}
	if leader >= 0 {
		addVoter(names[leader])
	}
	sort.Ints(voters)
	return leader, voters, leader >= 0 || len(voters) > 0
}

// idOf returns the name in v: v itself if it is a string, else its
// "name", "node" or "id".
func idOf(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if obj, ok := v.(map[string]any); ok {
		for _, k := range []string{"name", "node", "id"} {
			if s, ok := obj[k].(string); ok {
				return s
			}
		}
	}
	return ""
}

// nodeIndex returns the index of the node id names: equal to its name, or
// its name followed by a character that is no letter or digit; -1 if
// none.
func nodeIndex(id string, names []string) int {
	for i, n := range names {
		if id == n {
			return i
		}
	}
	for i, n := range names {
		if len(id) > len(n) && strings.HasPrefix(id, n) {
			if r := rune(id[len(n)]); !unicode.IsLetter(r) && !unicode.IsDigit(r) {
				return i
			}
		}
	}
	return -1
}

// SubNode returns the node in a subscription's name ("sub@b/ch",
// "replay@b/ch"): "b".
func SubNode(name string) string {
	_, rest, _ := strings.Cut(name, "@")
	node, _, _ := strings.Cut(rest, "/")
	return node
}
