package realip

import (
	"net/netip"
	"testing"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestParseTrusted(t *testing.T) {
	tr, err := ParseTrusted([]string{"10.0.0.0/8", " 192.0.2.10 ", "fd00::/8", "", "127.0.0.1/8"})
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{
		"10.1.2.3": true, "11.0.0.1": false, "192.0.2.10": true, "192.0.2.11": false,
		"fd12::1": true, "fe80::1": false, "127.9.9.9": true, "::ffff:10.0.0.1": true,
	} {
		if got := tr.Contains(addr(s)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", s, got, want)
		}
	}
	if tr.Contains(netip.Addr{}) {
		t.Error("the zero address is trusted")
	}
	for _, bad := range []string{"10.0.0.0/33", "10.0.0", "example.com", "fe80::1%eth0", "10.0.0.0/8/8"} {
		if _, err := ParseTrusted([]string{bad}); err == nil {
			t.Errorf("ParseTrusted(%q) accepted", bad)
		}
	}
	if !(Trusted{}).Empty() || tr.Empty() {
		t.Error("Empty")
	}
}

func TestFromHeaders(t *testing.T) {
	tr, _ := ParseTrusted([]string{"10.0.0.0/8", "2001:db8:ffff::/48"})
	proxy, stranger := addr("10.0.0.5"), addr("198.51.100.9")
	tests := []struct {
		name      string
		peer      netip.Addr
		fwd, xff  []string
		want      string
		forgedBut string
	}{
		{name: "untrusted peer: headers ignored", peer: stranger, xff: []string{"203.0.113.7"}, want: "198.51.100.9"},
		{name: "untrusted peer: Forwarded ignored", peer: stranger, fwd: []string{"for=203.0.113.7"}, want: "198.51.100.9"},
		{name: "trusted peer, no header", peer: proxy, want: "10.0.0.5"},
		{name: "one hop", peer: proxy, xff: []string{"203.0.113.7"}, want: "203.0.113.7"},
		{name: "client forges the left part", peer: proxy, xff: []string{"1.1.1.1, 203.0.113.7"}, want: "203.0.113.7"},
		{name: "two trusted proxies", peer: proxy, xff: []string{"203.0.113.7, 10.9.9.9"}, want: "203.0.113.7"},
		{name: "header on two lines", peer: proxy, xff: []string{"1.1.1.1, 203.0.113.7", "10.9.9.9"}, want: "203.0.113.7"},
		{name: "all hops trusted", peer: proxy, xff: []string{"10.1.1.1, 10.2.2.2"}, want: "10.1.1.1"},
		{name: "with port", peer: proxy, xff: []string{"203.0.113.7:4711"}, want: "203.0.113.7"},
		{name: "v6 with port", peer: proxy, xff: []string{"[2001:db8::7]:4711"}, want: "2001:db8::7"},
		{name: "mapped v4", peer: proxy, xff: []string{"::ffff:203.0.113.7"}, want: "203.0.113.7"},
		{name: "garbage from our proxy: the proxy", peer: proxy, xff: []string{"203.0.113.7, garbage"}, want: "10.0.0.5"},
		{name: "garbage left of the client", peer: proxy, xff: []string{"garbage, 203.0.113.7"}, want: "203.0.113.7"},
		{name: "garbage behind a second proxy", peer: proxy, xff: []string{"unknown, 10.9.9.9"}, want: "10.9.9.9"},
		{name: "empty elements", peer: proxy, xff: []string{" , 203.0.113.7,,"}, want: "203.0.113.7"},
		{name: "zone", peer: proxy, xff: []string{"fe80::1%eth0"}, want: "10.0.0.5"},
		{name: "Forwarded", peer: proxy, fwd: []string{"for=192.0.2.60;proto=http;by=203.0.113.43"}, want: "192.0.2.60"},
		{name: "Forwarded wins over XFF", peer: proxy, fwd: []string{"for=192.0.2.60"}, xff: []string{"203.0.113.7"}, want: "192.0.2.60"},
		{name: "Forwarded v6 quoted with port", peer: proxy, fwd: []string{`For="[2001:db8:cafe::17]:4711"`}, want: "2001:db8:cafe::17"},
		{name: "Forwarded v4 quoted with port", peer: proxy, fwd: []string{`for="192.0.2.60:88"`}, want: "192.0.2.60"},
		{name: "Forwarded list", peer: proxy, fwd: []string{"for=1.1.1.1, for=192.0.2.43, for=10.3.3.3"}, want: "192.0.2.43"},
		{name: "Forwarded trusted v6 proxy", peer: proxy, fwd: []string{`for=192.0.2.43, for="[2001:db8:ffff::1]"`}, want: "192.0.2.43"},
		{name: "Forwarded obfuscated", peer: proxy, fwd: []string{"for=_hidden"}, want: "10.0.0.5"},
		{name: "Forwarded unknown", peer: proxy, fwd: []string{"for=unknown, for=10.3.3.3"}, want: "10.3.3.3"},
		{name: "Forwarded without for", peer: proxy, fwd: []string{"proto=https"}, want: "10.0.0.5"},
		{name: "Forwarded unbracketed v6", peer: proxy, fwd: []string{"for=2001:db8::1"}, want: "10.0.0.5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tr.FromHeaders(tc.peer, tc.fwd, tc.xff); got != addr(tc.want) {
				t.Fatalf("FromHeaders = %v, want %s", got, tc.want)
			}
		})
	}
	// Nothing trusted: never the header.
	if got := (Trusted{}).FromHeaders(proxy, nil, []string{"203.0.113.7"}); got != proxy {
		t.Fatalf("with nothing trusted: %v", got)
	}
}

// FuzzFromHeaders: whatever the headers say, the answer is the peer or
// an address written in them, and never one the peer is not trusted to
// vouch for.
func FuzzFromHeaders(f *testing.F) {
	f.Add("for=192.0.2.60;proto=http, for=10.1.1.1", "203.0.113.7, 10.0.0.1", true)
	f.Add("", "[2001:db8::7]:4711,,garbage", false)
	f.Add(`for="[::1]:80"`, "", true)
	tr, _ := ParseTrusted([]string{"10.0.0.0/8", "::1/128"})
	f.Fuzz(func(t *testing.T, fwd, xff string, trusted bool) {
		peer := addr("198.51.100.9")
		if trusted {
			peer = addr("10.0.0.5")
		}
		var fl []string
		if fwd != "" {
			fl = []string{fwd}
		}
		got := tr.FromHeaders(peer, fl, []string{xff})
		if !trusted && got != peer {
			t.Fatalf("untrusted peer, got %v", got)
		}
		if !got.IsValid() || got.Zone() != "" || got.Is4In6() {
			t.Fatalf("got %v", got)
		}
	})
}
