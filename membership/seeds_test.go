package membership

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fakeResolver answers from maps; a name in fail answers an error.
type fakeResolver struct {
	ips  map[string][]string
	srvs map[string][]*net.SRV
	fail map[string]bool
}

func (f *fakeResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	if f.fail[host] {
		return nil, errors.New("SERVFAIL " + host)
	}
	var out []net.IPAddr
	for _, s := range f.ips[host] {
		out = append(out, net.IPAddr{IP: net.ParseIP(s)})
	}
	if out == nil {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

func (f *fakeResolver) LookupSRV(_ context.Context, service, proto, name string) (string, []*net.SRV, error) {
	if service != "" || proto != "" {
		return "", nil, errors.New("service and proto must be empty: the name is looked up as given")
	}
	if f.fail[name] {
		return "", nil, errors.New("SERVFAIL " + name)
	}
	return name, f.srvs[name], nil
}

func TestResolveSeeds(t *testing.T) {
	r := &fakeResolver{
		ips: map[string][]string{
			"sluice-headless.ns.svc": {"10.0.0.3", "10.0.0.1", "10.0.0.2", "fd00::4"},
			"sluice-0.h":             {"10.0.0.1"},
			"sluice-1.h":             {"10.0.0.2", "::ffff:10.0.0.2"},
		},
		srvs: map[string][]*net.SRV{
			"_gossip._tcp.h": {{Target: "sluice-0.h.", Port: 7946}, {Target: "sluice-1.h.", Port: 7950}, {Target: "gone.h.", Port: 7946}},
		},
		fail: map[string]bool{"broken.example": true},
	}
	self := func(ap netip.AddrPort) bool { return ap == netip.MustParseAddrPort("10.0.0.1:7946") }
	tests := []struct {
		name    string
		seeds   []string
		want    string
		wantErr string
	}{
		{"ip literal", []string{"192.0.2.1:7946"}, "192.0.2.1:7946", ""},
		{"v6 literal", []string{"[2001:db8::1]:7946"}, "[2001:db8::1]:7946", ""},
		{"A and AAAA, self skipped", []string{"sluice-headless.ns.svc:7946"}, "10.0.0.2:7946 10.0.0.3:7946 [fd00::4]:7946", ""},
		{"SRV with ports per target, self skipped, a target that is gone",
			[]string{"dnssrv+_gossip._tcp.h"}, "10.0.0.2:7950", "gone.h"},
		{"duplicates merged", []string{"sluice-1.h:7946", "10.0.0.2:7946", "sluice-headless.ns.svc:7946"},
			"10.0.0.2:7946 10.0.0.3:7946 [fd00::4]:7946", ""},
		{"one seed fails, the others count", []string{"broken.example:7946", "192.0.2.1:7946"}, "192.0.2.1:7946", "SERVFAIL broken.example"},
		{"only self", []string{"sluice-0.h:7946"}, "", ""},
		{"not found", []string{"nothing.example:7946"}, "", "no such host"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveSeeds(context.Background(), r, tc.seeds, self)
			if strings.Join(got, " ") != tc.want {
				t.Errorf("addresses %q, want %q", got, tc.want)
			}
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestValidSeedAndNeedsDNS(t *testing.T) {
	for _, s := range []string{"10.0.0.1:7946", "[::1]:1", "sluice-headless.ns.svc.cluster.local:7946", "dnssrv+_gossip._tcp.sluice"} {
		if err := ValidSeed(s); err != nil {
			t.Errorf("ValidSeed(%q): %v", s, err)
		}
	}
	for _, s := range []string{"10.0.0.1", ":7946", "host:0", "host:99999", "dnssrv+", "dnssrv+name:7946", "host:port"} {
		if err := ValidSeed(s); err == nil {
			t.Errorf("ValidSeed(%q) accepted", s)
		}
	}
	if seedsNeedDNS([]string{"10.0.0.1:1", "[::1]:2"}) || !seedsNeedDNS([]string{"10.0.0.1:1", "h:2"}) || !seedsNeedDNS([]string{"dnssrv+x"}) {
		t.Error("seedsNeedDNS")
	}
	if _, _, err := (&Config{Name: "n", BindAddr: "127.0.0.1:0", Join: []string{"dnssrv+a:1"}}).memberlistConfig(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("a bad seed passed validation: %v", err)
	}
}

func TestSelfMatcher(t *testing.T) {
	adv := netip.MustParseAddrPort("10.0.0.1:7946")
	local := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("192.168.1.5")}
	specific := selfMatcher(adv, false, local)
	all := selfMatcher(adv, true, local)
	for _, tc := range []struct {
		ap            string
		specific, all bool
	}{
		{"10.0.0.1:7946", true, true},
		{"192.168.1.5:7946", false, true},
		{"127.0.0.1:7946", false, true},
		{"192.168.1.5:7947", false, false},
		{"10.0.0.2:7946", false, false},
	} {
		ap := netip.MustParseAddrPort(tc.ap)
		if specific(ap) != tc.specific || all(ap) != tc.all {
			t.Errorf("%s: bound to one address %v, to all %v", tc.ap, specific(ap), all(ap))
		}
	}
}

// dnsServer is a DNS server on loopback whose answers the test sets:
// the resolver under the test's control.
type dnsServer struct {
	addr string
	mu   sync.Mutex
	a    map[string][]string   // name -> IPv4 addresses
	srv  map[string][]*net.SRV // name -> records
	fail map[string]bool       // name -> SERVFAIL
	srvr *dns.Server
}

func startDNS(t *testing.T) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsServer{addr: pc.LocalAddr().String(), a: map[string][]string{}, srv: map[string][]*net.SRV{}, fail: map[string]bool{}}
	started := make(chan struct{})
	d.srvr = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(d.serve), NotifyStartedFunc: func() { close(started) }}
	done := make(chan struct{})
	go func() { // ends with Shutdown below
		defer close(done)
		_ = d.srvr.ActivateAndServe()
	}()
	<-started
	t.Cleanup(func() {
		_ = d.srvr.Shutdown()
		<-done
	})
	return d
}

func (d *dnsServer) serve(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, q := range req.Question {
		name := strings.TrimSuffix(q.Name, ".")
		if d.fail[name] {
			m.Rcode = dns.RcodeServerFailure
			break
		}
		switch q.Qtype {
		case dns.TypeA:
			for _, ip := range d.a[name] {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0}, A: net.ParseIP(ip)})
			}
		case dns.TypeSRV:
			for _, s := range d.srv[name] {
				m.Answer = append(m.Answer, &dns.SRV{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 0},
					Target: dns.Fqdn(s.Target), Port: s.Port, Priority: 1, Weight: 1})
			}
		}
	}
	_ = w.WriteMsg(m)
}

func (d *dnsServer) setA(name string, ips ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.a[name] = ips
}

func (d *dnsServer) setSRV(name string, srvs ...*net.SRV) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.srv[name] = srvs
}

func (d *dnsServer) setFail(name string, fail bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail[name] = fail
}

// resolver is a net.Resolver that asks only this server.
func (d *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", d.addr)
	}}
}

// dnsNode starts a member that joins seeds through d's answers, retrying
// and looking again quickly.
func dnsNode(t *testing.T, d *dnsServer, name, bind string, seeds ...string) *tnode {
	return start(t, name, bind, seeds, func(c *Config) {
		c.Resolver = d.resolver()
		c.JoinRetry = 50 * time.Millisecond
		c.RejoinInterval = 100 * time.Millisecond
	})
}

// samePortOn finds a port free for TCP and UDP on every one of ips.
func samePortOn(t *testing.T, ips ...string) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", ips[0]+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ok := true
		for _, ip := range ips {
			addr := fmt.Sprintf("%s:%d", ip, port)
			tl, err1 := net.Listen("tcp", addr)
			ul, err2 := net.ListenPacket("udp", addr)
			if tl != nil {
				tl.Close()
			}
			if ul != nil {
				ul.Close()
			}
			ok = ok && err1 == nil && err2 == nil
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on all addresses")
	return 0
}

// TestJoinByName_AnswersGrowAsNodesStart: three nodes join through one
// DNS name (A records, as a headless Service has), started one after the
// other while the name's answers grow, as pods' records appear when they
// start; the name fails for a while in the middle; each node's own address
// is among the answers. They form one cluster.
func TestJoinByName_AnswersGrowAsNodesStart(t *testing.T) {
	d := startDNS(t)
	ips := []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}
	port := samePortOn(t, ips...)
	seed := fmt.Sprintf("sluice-headless.test:%d", port)
	d.setA("sluice-headless.test", ips[0])
	a := dnsNode(t, d, "a", fmt.Sprintf("%s:%d", ips[0], port), seed)
	if len(a.Members()) != 1 {
		t.Fatalf("a alone: %s", names(a.Members()))
	}
	d.setA("sluice-headless.test", ips[0], ips[1])
	b := dnsNode(t, d, "b", fmt.Sprintf("%s:%d", ips[1], port), seed)
	for _, n := range []*tnode{a, b} {
		waitFor(t, 10*time.Second, n.Name()+" sees 2", func() bool { return len(n.Members()) == 2 })
	}
	d.setFail("sluice-headless.test", true)
	c := dnsNode(t, d, "c", fmt.Sprintf("%s:%d", ips[2], port), seed)
	if len(c.Members()) != 1 {
		t.Fatalf("c joined while the name failed: %s", names(c.Members()))
	}
	d.setFail("sluice-headless.test", false)
	d.setA("sluice-headless.test", ips[2], ips[0], ips[1])
	for _, n := range []*tnode{a, b, c} {
		waitFor(t, 10*time.Second, n.Name()+" sees 3", func() bool { return len(n.Members()) == 3 })
	}
}

// TestJoinBySRV_SeparateGroupsMerge: four nodes on one address with
// their own ports, found through SRV records. While the answers were
// partial, a and b found only each other, and c and d only each other;
// once the SRV name answers all four, the groups merge, because a joined
// node with DNS seeds keeps looking.
func TestJoinBySRV_SeparateGroupsMerge(t *testing.T) {
	d := startDNS(t)
	ports := make([]uint16, 4)
	for i := range ports {
		ports[i] = uint16(samePortOn(t, "127.0.0.1"))
	}
	d.setA("node.test", "127.0.0.1")
	srv := func(i int) *net.SRV { return &net.SRV{Target: "node.test", Port: ports[i]} }
	d.setSRV("_gossip._tcp.left.test", srv(0), srv(1))
	d.setSRV("_gossip._tcp.right.test", srv(2), srv(3))
	nodes := []*tnode{
		dnsNode(t, d, "a", fmt.Sprintf("127.0.0.1:%d", ports[0]), "dnssrv+_gossip._tcp.left.test"),
		dnsNode(t, d, "b", fmt.Sprintf("127.0.0.1:%d", ports[1]), "dnssrv+_gossip._tcp.left.test"),
		dnsNode(t, d, "c", fmt.Sprintf("127.0.0.1:%d", ports[2]), "dnssrv+_gossip._tcp.right.test"),
		dnsNode(t, d, "d", fmt.Sprintf("127.0.0.1:%d", ports[3]), "dnssrv+_gossip._tcp.right.test"),
	}
	for _, n := range nodes {
		waitFor(t, 10*time.Second, n.Name()+" sees its pair", func() bool { return len(n.Members()) == 2 })
	}
	d.setSRV("_gossip._tcp.left.test", srv(3), srv(2), srv(1), srv(0))
	for _, n := range nodes {
		waitFor(t, 10*time.Second, n.Name()+" sees 4", func() bool { return len(n.Members()) == 4 })
	}
}
