package engine

import (
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// The dedup window across hosts (host/dedup.go): the host of a channel's
// new streamlet completes the window from the ids in the earlier
// streamlets, read from their hosts over the node links, before its first
// append. Both tests fail when the window is rebuilt only from the records
// the new host holds itself.

// dedupPublisher publishes to one channel through one gateway.
type dedupPublisher struct {
	t  *testing.T
	c  *rawConn
	ch string
	i  int
}

func (p *dedupPublisher) withID(id, payload string) uint64 {
	return p.c.publishFrame(wire.AppendPublishExt(nil, p.c.nextID(), wire.FlagAck, p.ch, []byte(id), nil, []byte(payload)))
}

// plain publishes one message without an id and returns its position; an
// UNAVAILABLE (a failover in progress) is retried, a bounded number of times.
func (p *dedupPublisher) plain() uint64 {
	p.t.Helper()
	for tries := 0; tries < 500; tries++ {
		p.i++
		o, err := publishTolerant(p.c, p.ch, p.i)
		if err != nil {
			p.t.Fatal(err)
		}
		if o.err == nil {
			return o.pos
		}
		if o.err.Code != wire.CodeUnavailable {
			p.t.Fatalf("publish: %v", o.err)
		}
	}
	p.t.Fatal("publishes refused for 500 tries")
	return 0
}

// openOn publishes plain messages until the channel's open streamlet is on
// a host for which want is true and has room for two more messages; it
// returns the last position.
func (p *dedupPublisher) openOn(info func() role.ChannelInfo, limit int, want func(host string) bool) uint64 {
	p.t.Helper()
	var last uint64
	for n := 0; n < 400; n++ {
		last = p.plain()
		in := info()
		if k := in.Locate(last); k >= 0 {
			r := in.Streamlets[k]
			if !r.Closed && want(r.Host) && last-r.First+3 <= uint64(limit) {
				return last
			}
		}
	}
	p.t.Fatal("the channel's open streamlet never moved to the wanted host")
	return 0
}

func hostOfPos(t *testing.T, info role.ChannelInfo, pos uint64) string {
	t.Helper()
	k := info.Locate(pos)
	if k < 0 {
		t.Fatalf("position %d not in %+v", pos, info.Streamlets)
	}
	return info.Streamlets[k].Host
}

func dupsByNode(nodes []*Server) map[string]uint64 {
	m := map[string]uint64{}
	for _, s := range nodes {
		m[s.opts.ServerName] = s.host.Dedup().Duplicates
	}
	return m
}

// TestCluster_DedupAcrossAHostChange: a message id published through a
// gateway into a streamlet on one host is recognised after the channel's
// writes moved to a streamlet on another host: the repeat gets the first
// position, and nothing is stored.
func TestCluster_DedupAcrossAHostChange(t *testing.T) {
	const limit = 8
	nodes := startCluster3(t, func(o *Options) { o.LimitMsgs = limit; o.LimitLife = time.Hour })
	a := nodes[0]
	ch := channelManagedBy(t, a, "a", "ddhost") // hosted on b and c
	c, _ := helloFeat(t, a.Addr(), wire.FeatureHeaders)
	p := &dedupPublisher{t: t, c: c, ch: ch}
	info := func() role.ChannelInfo { in, _ := stateInfo(a, ch); return in }

	first := p.withID("order-1", "first")
	h1 := hostOfPos(t, info(), first)
	// A few tries: the open streamlet may fill between the check and the
	// repeat, and the next one may be on h1 again.
	for try := 0; ; try++ {
		if try == 5 {
			t.Fatal("the repeat never reached a host other than the first one's")
		}
		last := p.openOn(info, limit, func(h string) bool { return h != h1 })
		before := dupsByNode(nodes)
		if again := p.withID("order-1", "again"); again != first {
			t.Fatalf("repeat on another host got position %d, first %d (%+v)", again, first, info().Streamlets)
		}
		next := p.plain()
		if next != last+1 {
			t.Fatalf("after the repeat the next position is %d, want %d: the repeat was stored", next, last+1)
		}
		after := dupsByNode(nodes)
		if after[h1] == before[h1] {
			decided := ""
			for n := range after {
				if after[n] != before[n] {
					decided = n
				}
			}
			if decided == "" {
				t.Fatal("no host counted the duplicate")
			}
			for _, s := range nodes {
				if s.opts.ServerName == decided && s.host.Dedup().Fetched == 0 {
					t.Fatalf("host %s decided without reading ids from %s", decided, h1)
				}
			}
			return
		}
	}
}

// TestCluster_DedupAcrossAManagerFailover: the id is stored on host x
// while c leads (manages every channel); c dies, x leads now and opens the
// channel's next streamlets on the other node y, whose window comes from
// x's records: the repeat gets the first position, nothing is stored.
func TestCluster_DedupAcrossAManagerFailover(t *testing.T) {
	const limit = 8
	nodes := startCluster3(t, func(o *Options) { o.LimitMsgs = limit; o.LimitLife = time.Hour })
	a, b, c := nodes[0], nodes[1], nodes[2]
	ch := channelManagedBy(t, a, "c", "ddfail")
	x, y := a, b
	conn, _ := helloFeat(t, y.Addr(), wire.FeatureHeaders)
	p := &dedupPublisher{t: t, c: conn, ch: ch}
	cInfo := func() role.ChannelInfo { in, _ := stateInfo(c, ch); return in }
	p.openOn(cInfo, limit, func(h string) bool { return h == x.opts.ServerName })
	first := p.withID("order-1", "first")
	if h := hostOfPos(t, cInfo(), first); h != x.opts.ServerName {
		t.Fatalf("the id went to %s, want %s", h, x.opts.ServerName)
	}

	kill(c)
	lead(t, y, x.opts.ServerName)
	eventually(t, 20*time.Second, "a and b see x lead", func() bool {
		ma, mb := a.clu().Leadership().Leader, b.clu().Leadership().Leader
		return ma == x.opts.ServerName && mb == ma
	})
	xInfo := func() role.ChannelInfo { in, _ := stateInfo(x, ch); return in }
	last := p.openOn(xInfo, limit, func(h string) bool { return h == y.opts.ServerName })
	if again := p.withID("order-1", "again"); again != first {
		t.Fatalf("repeat after the failover got position %d, first %d (%+v)", again, first, xInfo().Streamlets)
	}
	if next := p.plain(); next != last+1 {
		t.Fatalf("after the repeat the next position is %d, want %d: the repeat was stored", next, last+1)
	}
	if st := y.host.Dedup(); st.Duplicates != 1 || st.Fetched == 0 {
		t.Fatalf("y's dedup stats %+v: the repeat was not decided there from x's ids", st)
	}
}
