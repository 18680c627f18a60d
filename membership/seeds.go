package membership

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Seeds (Config.Join) name the members to join, in three forms:
//
//	IP:PORT              that address
//	HOST:PORT            every A and AAAA record of HOST, at PORT (a
//	                     Kubernetes headless Service: one record per pod)
//	dnssrv+NAME          every SRV record of NAME (for example
//	                     _gossip._tcp.sluice-headless.ns.svc.cluster.local),
//	                     each target's A and AAAA records at its port
//
// Names are resolved again at every join attempt, so the answers may
// grow as members start (a pod's record appears when it is scheduled),
// change, or fail for a while. An answer that is this node's own address
// is skipped. With a name among the seeds, the joiner keeps looking after
// this node has joined: every RejoinInterval it resolves them again and
// joins the addresses that are no live member, so that nodes which
// formed separate groups while the answers were partial merge.

// SRVPrefix marks a seed resolved through SRV records.
const SRVPrefix = "dnssrv+"

// Resolver is the DNS a node resolves its seeds with; *net.Resolver
// satisfies it. Its methods may be called from any goroutine.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// ValidSeed checks the form of one seed without resolving it.
func ValidSeed(s string) error {
	if name, ok := strings.CutPrefix(s, SRVPrefix); ok {
		if name == "" || strings.ContainsAny(name, ":/ ") {
			return fmt.Errorf("%q: %sNAME needs a DNS name without a port", s, SRVPrefix)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port must be 1..65535", s)
	}
	if host == "" {
		return fmt.Errorf("%q: no host", s)
	}
	return nil
}

// seedsNeedDNS reports whether any seed is a name (resolved anew at each
// attempt) rather than an IP address.
func seedsNeedDNS(seeds []string) bool {
	for _, s := range seeds {
		if strings.HasPrefix(s, SRVPrefix) {
			return true
		}
		if host, _, err := net.SplitHostPort(s); err == nil {
			if _, err := netip.ParseAddr(host); err != nil {
				return true
			}
		}
	}
	return false
}

// resolveSeeds turns seeds into "IP:PORT" addresses (sorted, without
// duplicates and without those self reports as this node's own). A seed
// that does not resolve adds its error to err; the others are still
// returned.
func resolveSeeds(ctx context.Context, r Resolver, seeds []string, self func(netip.AddrPort) bool) (addrs []string, err error) {
	var errs []error
	var found []netip.AddrPort
	for _, s := range seeds {
		aps, err := resolveSeed(ctx, r, s)
		if err != nil {
			errs = append(errs, err)
		}
		found = append(found, aps...)
	}
	seen := map[netip.AddrPort]bool{}
	for _, ap := range found {
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		if seen[ap] || (self != nil && self(ap)) {
			continue
		}
		seen[ap] = true
		addrs = append(addrs, ap.String())
	}
	slices.Sort(addrs)
	return addrs, errors.Join(errs...)
}

// resolveSeed resolves one seed.
func resolveSeed(ctx context.Context, r Resolver, s string) ([]netip.AddrPort, error) {
	if name, ok := strings.CutPrefix(s, SRVPrefix); ok {
		_, srvs, err := r.LookupSRV(ctx, "", "", name)
		if err != nil {
			return nil, fmt.Errorf("seed %s: %w", s, err)
		}
		var out []netip.AddrPort
		var errs []error
		for _, srv := range srvs {
			ips, err := lookupIPs(ctx, r, strings.TrimSuffix(srv.Target, "."))
			if err != nil {
				errs = append(errs, fmt.Errorf("seed %s: target %s: %w", s, srv.Target, err))
			}
			for _, ip := range ips {
				out = append(out, netip.AddrPortFrom(ip, srv.Port))
			}
		}
		return out, errors.Join(errs...)
	}
	host, ps, err := net.SplitHostPort(s)
	if err != nil {
		return nil, fmt.Errorf("seed %q: %w", s, err)
	}
	p, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || p == 0 {
		return nil, fmt.Errorf("seed %q: bad port", s)
	}
	ips, err := lookupIPs(ctx, r, host)
	if err != nil {
		return nil, fmt.Errorf("seed %s: %w", s, err)
	}
	out := make([]netip.AddrPort, 0, len(ips))
	for _, ip := range ips {
		out = append(out, netip.AddrPortFrom(ip, uint16(p)))
	}
	return out, nil
}

// lookupIPs returns host's addresses: host itself when it is an IP
// literal, else its A and AAAA records.
func lookupIPs(ctx context.Context, r Resolver, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip.WithZone("")}, nil
	}
	ias, err := r.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(ias))
	for _, ia := range ias {
		if ip, ok := netip.AddrFromSlice(ia.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// selfMatcher reports the addresses that are this node's own gossip
// address: its advertised IP and port, and, when it binds to all
// interfaces, every address of this host at its port.
func selfMatcher(advertised netip.AddrPort, bindAll bool, local []netip.Addr) func(netip.AddrPort) bool {
	return func(ap netip.AddrPort) bool {
		if ap == advertised {
			return true
		}
		if !bindAll || ap.Port() != advertised.Port() {
			return false
		}
		return slices.Contains(local, ap.Addr()) || ap.Addr().IsLoopback()
	}
}

// localAddrs lists the IP addresses of this host's interfaces.
func localAddrs() []netip.Addr {
	ias, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range ias {
		if pn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(pn.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}
