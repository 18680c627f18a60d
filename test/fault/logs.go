package fault

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Opened is one streamlet opening as its manager logs it at debug level
// ("sluice: streamlet opened", manager/manager.go): the fault cases read
// from the nodes' logs which node orders and which follows the open
// streamlet of each channel at the moment of a fault.
type Opened struct {
	At        time.Time
	Channel   string
	Streamlet uint64
	Hosts     []string // the replica set, orderer first
}

var openedLine = regexp.MustCompile(`^time=(\S+) level=DEBUG msg="sluice: streamlet opened" channel=(\S+) streamlet=([0-9]+) hosts="?\[([^\]]*)\]"?`)

// ParseOpened parses one log line; false for any other line.
func ParseOpened(line string) (Opened, bool) {
	m := openedLine.FindStringSubmatch(line)
	if m == nil {
		return Opened{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		return Opened{}, false
	}
	id, err := strconv.ParseUint(m[3], 10, 64)
	if err != nil {
		return Opened{}, false
	}
	return Opened{At: at, Channel: m[2], Streamlet: id, Hosts: strings.Fields(m[4])}, true
}

// OpenSets returns, for each channel, the replica set of the streamlet
// opened last at or before at (ops in any order): the channel's open
// streamlet then, unless it was closed since with nothing opened after it.
func OpenSets(ops []Opened, at time.Time) map[string][]string {
	last := map[string]Opened{}
	for _, o := range ops {
		if o.At.After(at) {
			continue
		}
		if p, ok := last[o.Channel]; !ok || !o.At.Before(p.At) {
			last[o.Channel] = o
		}
	}
	out := make(map[string][]string, len(last))
	for ch, o := range last {
		out[ch] = o.Hosts
	}
	return out
}

// Roles is what one node is for a case's channels at one moment.
type Roles struct {
	Node     string
	Managed  int // channels it manages
	Ordered  int // channels whose open streamlet it orders (first replica)
	Followed int // channels whose open streamlet it holds as a follower
	Held     int // streamlets of the channels opened with it in the set, open or not
	Pubs     int // publishers connected to it
	Subs     int // subscribers connected to it (each to every channel)
}

// RolesOf counts the roles of node: manager maps each channel to its
// manager, ops are the openings logged so far and open is OpenSets'
// answer, pubs and subs name the node of each publisher and subscriber.
func RolesOf(node string, chans []string, manager func(string) string, ops []Opened, open map[string][]string, pubs, subs []string) Roles {
	r := Roles{Node: node}
	for _, o := range ops {
		if slices.Contains(chans, o.Channel) && slices.Contains(o.Hosts, node) {
			r.Held++
		}
	}
	for _, ch := range chans {
		if manager(ch) == node {
			r.Managed++
		}
		for i, h := range open[ch] {
			if h == node {
				if i == 0 {
					r.Ordered++
				} else {
					r.Followed++
				}
			}
		}
	}
	for _, n := range pubs {
		if n == node {
			r.Pubs++
		}
	}
	for _, n := range subs {
		if n == node {
			r.Subs++
		}
	}
	return r
}

// MostShared returns the two of names that are both in the most of
// open's replica sets, and in how many.
func MostShared(open map[string][]string, names []string) (x, y string, count int) {
	count = -1
	for i, a := range names {
		for _, b := range names[i+1:] {
			n := 0
			for _, set := range open {
				if slices.Contains(set, a) && slices.Contains(set, b) {
					n++
				}
			}
			if n > count {
				x, y, count = a, b, n
			}
		}
	}
	return x, y, count
}

// MostAlone returns the two of candidates that are the whole replica set
// of the most streamlets opened in ops, and of how many.
func MostAlone(ops []Opened, candidates []string) (x, y string, count int) {
	count = -1
	for i, a := range candidates {
		for _, b := range candidates[i+1:] {
			n := 0
			for _, o := range ops {
				if len(o.Hosts) == 2 && slices.Contains(o.Hosts, a) && slices.Contains(o.Hosts, b) {
					n++
				}
			}
			if n > count {
				x, y, count = a, b, n
			}
		}
	}
	return x, y, count
}
