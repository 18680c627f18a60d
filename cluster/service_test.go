package cluster

import (
	"slices"
	"testing"

	"github.com/sluice-rtm/sluice/cluster/view"
	"github.com/sluice-rtm/sluice/wire"
)

type recService struct{ alive [][]string }

func (r *recService) Serve(string, wire.NodeOp, []byte) (uint8, []byte, string) {
	return wire.NodeOK, nil, ""
}
func (r *recService) Members(alive []string) { r.alive = append(r.alive, alive) }

// TestServiceMembersOnlyThoseThatAnswer: the service learns this node and
// the live members whose gossip says they answer service ops, never one
// that does not (a node of an older version would end the link on the
// op); a node without a service answers service ops BAD_OP.
func TestServiceMembersOnlyThoseThatAnswer(t *testing.T) {
	rec := &recService{}
	c := &Cluster{self: "a", cfg: Config{Service: rec}}
	c.tellService([]view.Member{
		{Name: "a"},
		{Name: "b", Meta: view.Meta{Svc: true}},
		{Name: "c"},
	})
	if len(rec.alive) != 1 || !slices.Equal(slices.Sorted(slices.Values(rec.alive[0])), []string{"a", "b"}) {
		t.Fatalf("Members got %v, want [a b]", rec.alive)
	}
	bare := &Cluster{self: "a"}
	bare.tellService([]view.Member{{Name: "b", Meta: view.Meta{Svc: true}}})
	if st, _, _ := bare.serveService("b", wire.OpPresenceSync, nil); st != wire.NodeBadOp {
		t.Fatalf("a node without a service answered %d", st)
	}
}
