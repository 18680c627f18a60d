// Package proxyproto decodes the PROXY protocol header (versions 1 and 2,
// haproxy.org's proxy-protocol.txt) that a load balancer sends at the
// start of a TCP connection to tell the server the client's address.
//
// The header is input from the network: Parse never reads past the bytes
// it is given, checks every declared length against a fixed maximum
// before asking for more bytes, and never allocates. Whether to believe a
// header at all is the caller's decision: only from a peer it trusts
// (engine.Options.TrustedProxies), since anyone can send one.
//
// Version 1 (text, at most 107 bytes including CRLF):
//
//	"PROXY TCP4 203.0.113.7 192.0.2.1 51234 7400\r\n"
//	"PROXY TCP6 2001:db8::7 2001:db8::1 51234 7400\r\n"
//	"PROXY UNKNOWN[ anything]\r\n"           (peer addresses apply)
//
// Version 2 (binary):
//
//	offset  size  field
//	0       12    signature 0D 0A 0D 0A 00 0D 0A 51 55 49 54 0A
//	12      1     version (high nibble, 2) and command (low: 0 LOCAL, 1 PROXY)
//	13      1     address family (high: 0 UNSPEC, 1 INET, 2 INET6, 3 UNIX)
//	              and transport (low: 0 UNSPEC, 1 STREAM, 2 DGRAM)
//	14      2     length L of what follows, big endian (at most MaxV2Body)
//	16      L     INET:  src IPv4 (4), dst IPv4 (4), src port (2), dst port (2)
//	              INET6: src IPv6 (16), dst IPv6 (16), src port (2), dst port (2)
//	              then TLVs, skipped
//
// A LOCAL command, the UNSPEC or UNIX family and v1's UNKNOWN say "use
// the connection's own addresses" (health checks of the balancer itself):
// Header.Local is set and the addresses are zero.
//
// Pure functions, safe for concurrent use.
package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
)

// Sizes and limits.
const (
	// MaxV1 is the longest version 1 header, CRLF included (the spec's
	// bound: "PROXY UNKNOWN" with the longest TCP6 addresses and ports).
	MaxV1 = 107
	// V2HeaderLen is the fixed part of a version 2 header.
	V2HeaderLen = 16
	// MaxV2Body bounds the declared length of a version 2 header's
	// addresses and TLVs. Balancers send the 12 or 36 address bytes and
	// a few short TLVs (AWS: a VPC endpoint id; GCP and Azure: a
	// connection or link id); 2,048 bytes leave room for an SSL TLV with
	// a client certificate's names, and a peer cannot make the server
	// buffer more than MaxLen bytes before it has a header.
	MaxV2Body = 2048
	// MaxLen is the most bytes Parse ever needs to decide.
	MaxLen = V2HeaderLen + MaxV2Body
)

var (
	// ErrIncomplete means the bytes given are a prefix of a header that
	// may still be valid: call again with more (it is not an error of
	// the peer).
	ErrIncomplete = errors.New("proxyproto: incomplete header")
	// ErrNotProxy means the bytes do not start with either version's
	// signature: the stream carries no PROXY header.
	ErrNotProxy = errors.New("proxyproto: no PROXY protocol signature")
	// ErrMalformed is wrapped by every error about a header that starts
	// with a signature but is not valid; the message says where and what.
	ErrMalformed = errors.New("proxyproto: malformed header")
)

// v1Prefix and v2Sig are the two signatures.
var (
	v1Prefix = []byte("PROXY ")
	v2Sig    = []byte{0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A}
)

// Header is a decoded PROXY header.
type Header struct {
	Version int // 1 or 2
	// Local: the header names no client (v2 LOCAL, UNSPEC or UNIX
	// family; v1 UNKNOWN); use the connection's own peer address.
	Local bool
	// Src is the client's address and port, Dst the address it
	// connected to (zero when Local).
	Src, Dst netip.AddrPort
}

func malformed(version int, off int, format string, args ...any) error {
	return fmt.Errorf("%w: v%d at byte %d: %s", ErrMalformed, version, off, fmt.Sprintf(format, args...))
}

// Parse decodes the PROXY header at the start of b and returns it with
// its length n (the bytes to skip before the proxied stream). Errors:
// ErrIncomplete (b is a prefix of a possible header: wait for more, at
// most MaxLen bytes in all), ErrNotProxy (no signature: the stream is not
// PROXY protocol), or an error wrapping ErrMalformed.
func Parse(b []byte) (h Header, n int, err error) {
	switch {
	case hasPrefix(b, v2Sig):
		if len(b) < len(v2Sig) {
			return h, 0, ErrIncomplete
		}
		return parseV2(b)
	case hasPrefix(b, v1Prefix):
		if len(b) < len(v1Prefix) {
			return h, 0, ErrIncomplete
		}
		return parseV1(b)
	}
	return h, 0, ErrNotProxy
}

// hasPrefix reports whether b and sig agree on their common length and b
// is not empty.
func hasPrefix(b, sig []byte) bool {
	k := min(len(b), len(sig))
	return k > 0 && bytes.Equal(b[:k], sig[:k])
}

// parseV1 decodes a version 1 header; b starts with "PROXY ".
func parseV1(b []byte) (h Header, n int, err error) {
	h.Version = 1
	end := bytes.Index(b[:min(len(b), MaxV1)], []byte("\r\n"))
	if end < 0 {
		if len(b) >= MaxV1 {
			return h, 0, malformed(1, 0, "no CRLF within %d bytes", MaxV1)
		}
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			return h, 0, malformed(1, i, "LF without CR")
		}
		return h, 0, ErrIncomplete
	}
	n = end + 2
	line := b[len(v1Prefix):end]
	fields := bytes.Split(line, []byte(" "))
	switch string(fields[0]) {
	case "UNKNOWN":
		// "the receiver must ignore anything presented before the CRLF"
		h.Local = true
		return h, n, nil
	case "TCP4", "TCP6":
	default:
		return h, 0, malformed(1, len(v1Prefix), "protocol %q is none of TCP4, TCP6, UNKNOWN", clip(fields[0]))
	}
	if len(fields) != 5 {
		return h, 0, malformed(1, len(v1Prefix), "%d fields after PROXY, want 5 (protocol, addresses, ports)", len(fields))
	}
	v6 := string(fields[0]) == "TCP6"
	src, err1 := v1Addr(fields[1], v6)
	dst, err2 := v1Addr(fields[2], v6)
	sp, err3 := v1Port(fields[3])
	dp, err4 := v1Port(fields[4])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return h, 0, malformed(1, len(v1Prefix), "%v", err)
	}
	h.Src, h.Dst = netip.AddrPortFrom(src, sp), netip.AddrPortFrom(dst, dp)
	return h, n, nil
}

// v1Addr parses an address of a TCP4 (dotted quad) or TCP6 header.
func v1Addr(f []byte, v6 bool) (netip.Addr, error) {
	a, err := netip.ParseAddr(string(f))
	switch {
	case err != nil:
		return a, fmt.Errorf("address %q: %w", clip(f), err)
	case a.Zone() != "":
		return a, fmt.Errorf("address %q has a zone", clip(f))
	case v6 != a.Is6() || a.Is4In6():
		return a, fmt.Errorf("address %q does not match the protocol", clip(f))
	}
	return a, nil
}

// v1Port parses a decimal port without leading zeros.
func v1Port(f []byte) (uint16, error) {
	p, err := strconv.ParseUint(string(f), 10, 16)
	if err != nil || (len(f) > 1 && f[0] == '0') {
		return 0, fmt.Errorf("port %q is not 0..65535 without leading zeros", clip(f))
	}
	return uint16(p), nil
}

// parseV2 decodes a version 2 header; b starts with the 12-byte signature.
func parseV2(b []byte) (h Header, n int, err error) {
	h.Version = 2
	if len(b) < V2HeaderLen {
		return h, 0, ErrIncomplete
	}
	verCmd, fam := b[12], b[13]
	body := int(binary.BigEndian.Uint16(b[14:16]))
	if verCmd>>4 != 2 {
		return h, 0, malformed(2, 12, "version %d, want 2", verCmd>>4)
	}
	cmd := verCmd & 0x0F
	if cmd > 1 {
		return h, 0, malformed(2, 12, "command %d is neither LOCAL (0) nor PROXY (1)", cmd)
	}
	if body > MaxV2Body {
		return h, 0, malformed(2, 14, "length %d exceeds %d", body, MaxV2Body)
	}
	af, proto := fam>>4, fam&0x0F
	if af > 3 || proto > 2 {
		return h, 0, malformed(2, 13, "family byte 0x%02x names no family and transport", fam)
	}
	need := 0
	switch af {
	case 1:
		need = 12
	case 2:
		need = 36
	case 3:
		need = 216
	}
	if body < need {
		return h, 0, malformed(2, 14, "length %d is shorter than the %d address bytes of family %d", body, need, af)
	}
	n = V2HeaderLen + body
	if len(b) < n {
		return h, 0, ErrIncomplete
	}
	if cmd == 0 || af == 0 || af == 3 {
		// LOCAL, or no IP addresses: the connection's own endpoints apply.
		h.Local = true
		return h, n, nil
	}
	if proto != 1 {
		return h, 0, malformed(2, 13, "transport %d on a stream connection, want STREAM (1)", proto)
	}
	a := b[V2HeaderLen:]
	if af == 1 {
		src := netip.AddrFrom4([4]byte(a[0:4]))
		dst := netip.AddrFrom4([4]byte(a[4:8]))
		h.Src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(a[8:10]))
		h.Dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(a[10:12]))
		return h, n, nil
	}
	src := netip.AddrFrom16([16]byte(a[0:16]))
	dst := netip.AddrFrom16([16]byte(a[16:32]))
	h.Src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(a[32:34]))
	h.Dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(a[34:36]))
	return h, n, nil
}

// clip shortens a field quoted in an error.
func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// AppendV1 appends a version 1 header for a connection from src to dst
// (both IPv4 or both IPv6; otherwise "PROXY UNKNOWN"). For tests and
// proxies written in Go.
func AppendV1(dst []byte, src, to netip.AddrPort) []byte {
	s, d := src.Addr(), to.Addr()
	switch {
	case s.Is4() && d.Is4():
		dst = append(dst, "PROXY TCP4 "...)
	case s.Is6() && d.Is6() && !s.Is4In6() && !d.Is4In6():
		dst = append(dst, "PROXY TCP6 "...)
	default:
		return append(dst, "PROXY UNKNOWN\r\n"...)
	}
	dst = s.AppendTo(dst)
	dst = append(dst, ' ')
	dst = d.AppendTo(dst)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, uint64(src.Port()), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, uint64(to.Port()), 10)
	return append(dst, "\r\n"...)
}

// AppendV2 appends a version 2 PROXY header for a TCP connection from src
// to dst (both IPv4 or both IPv6), followed by tlvs (raw TLV bytes,
// possibly empty); with mismatched families it appends a LOCAL header.
func AppendV2(dst []byte, src, to netip.AddrPort, tlvs []byte) []byte {
	dst = append(dst, v2Sig...)
	s, d := src.Addr(), to.Addr()
	var addrs []byte
	fam := byte(0x00)
	switch {
	case s.Is4() && d.Is4():
		fam = 0x11
		a4, b4 := s.As4(), d.As4()
		addrs = append(append(addrs, a4[:]...), b4[:]...)
	case s.Is6() && d.Is6():
		fam = 0x21
		a16, b16 := s.As16(), d.As16()
		addrs = append(append(addrs, a16[:]...), b16[:]...)
	default:
		dst = append(dst, 0x20, 0x00)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(tlvs)))
		return append(dst, tlvs...)
	}
	addrs = binary.BigEndian.AppendUint16(addrs, src.Port())
	addrs = binary.BigEndian.AppendUint16(addrs, to.Port())
	dst = append(dst, 0x21, fam)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(addrs)+len(tlvs)))
	dst = append(dst, addrs...)
	return append(dst, tlvs...)
}
