package engine

import (
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// TestStartPosition: where a subscription starts, as a table over one
// channel whose retained messages are positions 1000..1009, published one
// millisecond apart from t0, with Next 1010.
func TestStartPosition(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	h := host.New("n", func() time.Time { return t0 })
	srv := &Server{host: h}
	g := role.Grant{Channel: "ch", Streamlet: h.NewID(), Host: "n", First: 1000, LimitMsgs: 100, LimitSize: 1 << 20,
		LeaseEnd: t0.Add(time.Hour).UnixNano()}
	if err := h.HostStreamlet(g); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := h.Streamlet(g.Streamlet).Append([]byte("m"), t0.Add(time.Duration(i)*time.Millisecond).UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	info := role.ChannelInfo{Epoch: 1, Earliest: 1000, Next: 1010,
		Streamlets: []role.StreamletRef{{ID: g.Streamlet, Host: "n", First: 1000}}}
	now := t0.Add(9 * time.Millisecond).UnixNano() // the last message's time
	for _, tc := range []struct {
		name  string
		start wire.StartKind
		arg   uint64
		want  uint64
	}{
		{"live", wire.StartLive, 0, 1010},
		{"earliest", wire.StartEarliest, 0, 1000},
		{"position inside", wire.StartPosition, 1004, 1004},
		{"position below earliest (a GAP follows)", wire.StartPosition, 10, 10},
		{"position ahead", wire.StartPosition, 5000, 5000},
		{"last 3", wire.StartLast, 3, 1007},
		{"last 0 is live", wire.StartLast, 0, 1010},
		{"last more than retained", wire.StartLast, 50, 1000},
		{"since 2 ms", wire.StartSince, 2, 1007},
		{"since 0 ms: the newest at now", wire.StartSince, 0, 1009},
		{"since before everything", wire.StartSince, 60_000, 1000},
		{"since, huge", wire.StartSince, 1 << 63, 1000},
	} {
		sb := wire.Subscribe{SubID: 1, Channel: []byte("ch"), Start: tc.start, Arg: tc.arg}
		if got := srv.startPosition(sb, &info, now); got != tc.want {
			t.Errorf("%s: start %d, want %d", tc.name, got, tc.want)
		}
	}
	empty := role.ChannelInfo{Epoch: 1, Earliest: 2000, Next: 2000}
	for _, k := range []wire.StartKind{wire.StartLive, wire.StartEarliest, wire.StartLast, wire.StartSince} {
		sb := wire.Subscribe{SubID: 1, Channel: []byte("ch"), Start: k, Arg: 5}
		if got := srv.startPosition(sb, &empty, now); got != 2000 {
			t.Errorf("empty channel, start %v: %d, want Next 2000", k, got)
		}
	}
}
