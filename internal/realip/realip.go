// Package realip finds the address of the client behind trusted proxies:
// which peers are trusted (a list of CIDR prefixes), and the client
// named by the HTTP headers a trusted proxy adds, X-Forwarded-For and
// Forwarded (RFC 7239).
//
// The rule, as nginx's real_ip_recursive and most proxies apply it: the
// chain of addresses is the header's list (leftmost = farthest) followed
// by the connection's peer. Walking it from the right, every trusted
// address is a proxy that passed the request on; the first untrusted one
// is the client. A client can write anything into the header it sends,
// but only to the left of what the trusted proxies append, so it cannot
// pass for anyone it likes. When the entry to look at next is not an IP
// address (obfuscated, "unknown", malformed), the walk stops at the
// proxy that reported it. Headers from an untrusted peer are never
// looked at.
//
// Pure functions, no allocation but the ones of parsing a prefix list;
// safe for concurrent use.
package realip

import (
	"fmt"
	"net/netip"
	"strings"
)

// Trusted is a set of trusted proxy addresses. The zero value trusts
// nothing.
type Trusted struct {
	prefixes []netip.Prefix
}

// ParseTrusted parses CIDR prefixes ("10.0.0.0/8", "fd00::/8") and bare
// addresses ("192.0.2.10", a /32 or /128). An IPv4 entry also matches
// the IPv4-mapped IPv6 form of its addresses.
func ParseTrusted(list []string) (Trusted, error) {
	var t Trusted
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		var p netip.Prefix
		var err error
		if strings.Contains(s, "/") {
			p, err = netip.ParsePrefix(s)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(s); err == nil {
				if a.Zone() != "" {
					return Trusted{}, fmt.Errorf("trusted proxy %q has a zone", s)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil {
			return Trusted{}, fmt.Errorf("trusted proxy %q is not an address or CIDR prefix: %w", s, err)
		}
		t.prefixes = append(t.prefixes, p.Masked())
	}
	return t, nil
}

// Empty reports whether nothing is trusted.
func (t Trusted) Empty() bool { return len(t.prefixes) == 0 }

// Contains reports whether a is a trusted proxy.
func (t Trusted) Contains(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	a = a.Unmap().WithZone("")
	for _, p := range t.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// FromHeaders returns the client address of an HTTP request that came
// from peer: when peer is trusted, the walk described in the package
// comment over the Forwarded header's for= values if the request has any
// Forwarded header, else over X-Forwarded-For (each slice holds the
// header's lines in order; a header repeated is one list). Otherwise, or
// when the headers name nobody, peer.
func (t Trusted) FromHeaders(peer netip.Addr, forwarded, xff []string) netip.Addr {
	if !t.Contains(peer) {
		return peer
	}
	if len(forwarded) > 0 {
		return t.walk(peer, forwarded, forwardedFor)
	}
	return t.walk(peer, xff, xffEntry)
}

// walk goes through the comma-separated entries of lines from the last
// one back, as the package comment says. parse turns one entry into an
// address (invalid: not an address).
func (t Trusted) walk(peer netip.Addr, lines []string, parse func(string) netip.Addr) netip.Addr {
	client := peer
	for i := len(lines) - 1; i >= 0; i-- {
		rest := lines[i]
		for rest != "" {
			var entry string
			if k := strings.LastIndexByte(rest, ','); k >= 0 {
				rest, entry = rest[:k], rest[k+1:]
			} else {
				rest, entry = "", rest
			}
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue // "a,,b": empty list elements are allowed (RFC 9110 5.6.1)
			}
			a := parse(entry)
			if !a.IsValid() {
				return client
			}
			client = a.Unmap()
			if !t.Contains(client) {
				return client
			}
		}
	}
	return client // every hop trusted: the farthest one
}

// xffEntry parses one X-Forwarded-For element: an address, possibly with
// a port ("203.0.113.7:4711", "[2001:db8::1]:4711"), as some proxies
// write it.
func xffEntry(s string) netip.Addr {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return a
	}
	if ap, err := netip.ParseAddrPort(s); err == nil && ap.Addr().Zone() == "" {
		return ap.Addr()
	}
	return netip.Addr{}
}

// forwardedFor returns the for= parameter of one Forwarded element
// ("for=192.0.2.60;proto=http;by=203.0.113.43", RFC 7239 4): an
// address, quoted or not, IPv6 in brackets, with an optional port.
// Obfuscated identifiers ("_hidden"), "unknown" and an element without
// for= are not addresses.
func forwardedFor(elem string) netip.Addr {
	for pair := range strings.SplitSeq(elem, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(k, "for") {
			continue
		}
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		if strings.HasPrefix(v, "[") {
			host, _, _ := strings.Cut(v[1:], "]")
			a, err := netip.ParseAddr(host)
			if err != nil || !a.Is6() || a.Zone() != "" {
				return netip.Addr{}
			}
			return a
		}
		host, _, _ := strings.Cut(v, ":") // an IPv4 address and its port
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is4() {
			return netip.Addr{}
		}
		return a
	}
	return netip.Addr{}
}
