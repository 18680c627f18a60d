package cluster

import (
	"testing"

	"github.com/sluice-rtm/sluice/role"
)

// TestDrainPending: when a draining node may go, per channel: a streamlet
// it holds counts until the list names another holder for it, or no
// longer lists it (expired), or lists it lost.
func TestDrainPending(t *testing.T) {
	sealed := func(id uint64) role.Hosted { return role.Hosted{ID: id, Sealed: true} }
	open := role.Hosted{ID: 9}
	ref := func(id uint64, host string, closed, lost bool) role.StreamletRef {
		return role.StreamletRef{ID: id, Host: host, Closed: closed, Lost: lost}
	}
	cases := []struct {
		name  string
		hs    []role.Hosted
		refs  []role.StreamletRef
		found bool
		want  int
	}{
		{"holds nothing", nil, []role.StreamletRef{ref(1, "d", true, false)}, true, 0},
		{"the only holder of closed streamlets", []role.Hosted{sealed(1), sealed(2)},
			[]role.StreamletRef{ref(1, "d", true, false), ref(2, "d", true, false)}, true, 2},
		{"copied: another holder is listed", []role.Hosted{sealed(1), sealed(2)},
			[]role.StreamletRef{ref(1, "a", true, false), ref(2, "d", true, false)}, true, 1},
		{"expired from the list", []role.Hosted{sealed(1)}, []role.StreamletRef{ref(2, "a", true, false)}, true, 0},
		{"listed lost", []role.Hosted{sealed(1)}, []role.StreamletRef{ref(1, "d", true, true)}, true, 0},
		{"sealed here, still open in the list (the manager has not closed it yet)", []role.Hosted{sealed(1)},
			[]role.StreamletRef{ref(1, "d", false, false)}, true, 1},
		{"open here", []role.Hosted{open}, []role.StreamletRef{ref(9, "d", false, false)}, true, 1},
		{"the manager knows no such channel", []role.Hosted{sealed(1)}, nil, false, 0},
		{"the other holder drains too", []role.Hosted{sealed(1)},
			[]role.StreamletRef{{ID: 1, Host: "e", Replicas: []string{"e", "d"}, Closed: true}}, true, 1},
		{"replicated: a usable holder besides", []role.Hosted{sealed(1)},
			[]role.StreamletRef{{ID: 1, Host: "d", Replicas: []string{"d", "e", "a"}, Closed: true}}, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			usable := func(n string) bool { return n != "d" && n != "e" } // d and e drain
			got := drainPending("d", tc.hs, role.ChannelInfo{Streamlets: tc.refs}, tc.found, usable)
			if got != tc.want {
				t.Fatalf("drainPending = %d, want %d", got, tc.want)
			}
		})
	}
}
