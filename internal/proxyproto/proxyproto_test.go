package proxyproto

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// unhex decodes a vector written as hex with spaces and comments after #.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	var clean strings.Builder
	for _, line := range strings.Split(s, "\n") {
		line, _, _ = strings.Cut(line, "#")
		clean.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(clean.String())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParse_Golden decodes headers written out byte by byte, as a load
// balancer sends them, followed by the first bytes of the proxied stream.
func TestParse_Golden(t *testing.T) {
	v2inet := `
		0d0a0d0a000d0a515549540a   # signature
		21                         # version 2, command PROXY
		11                         # INET, STREAM
		000c                       # 12 bytes follow
		cb007107                   # src 203.0.113.7
		c0000201                   # dst 192.0.2.1
		c822                       # src port 51234
		1ce8                       # dst port 7400
	`
	v2inet6TLV := `
		0d0a0d0a000d0a515549540a   # signature
		21 21                      # PROXY; INET6, STREAM
		0029                       # 41 bytes: 36 of addresses, one 5-byte TLV
		20010db8000000000000000000000007   # src 2001:db8::7
		20010db8000000000000000000000001   # dst 2001:db8::1
		c822 1ce8                  # ports 51234, 7400
		04 0002 0000               # TLV NOOP, 2 bytes
	`
	v2local := `
		0d0a0d0a000d0a515549540a   # signature
		20 00                      # LOCAL; UNSPEC
		0000                       # nothing follows
	`
	tests := []struct {
		name string
		in   []byte
		want Header
		n    int
	}{
		{"v1 tcp4", []byte("PROXY TCP4 203.0.113.7 192.0.2.1 51234 7400\r\nHELLO"),
			Header{Version: 1, Src: ap("203.0.113.7:51234"), Dst: ap("192.0.2.1:7400")}, 45},
		{"v1 tcp6", []byte("PROXY TCP6 2001:db8::7 2001:db8::1 51234 7400\r\n"),
			Header{Version: 1, Src: ap("[2001:db8::7]:51234"), Dst: ap("[2001:db8::1]:7400")}, 47},
		{"v1 unknown", []byte("PROXY UNKNOWN\r\nGET /"), Header{Version: 1, Local: true}, 15},
		{"v1 unknown with addresses", []byte("PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n"),
			Header{Version: 1, Local: true}, 59},
		{"v2 inet", append(unhex(t, v2inet), "GET / HTTP/1.1"...),
			Header{Version: 2, Src: ap("203.0.113.7:51234"), Dst: ap("192.0.2.1:7400")}, 28},
		{"v2 inet6 with a TLV", unhex(t, v2inet6TLV),
			Header{Version: 2, Src: ap("[2001:db8::7]:51234"), Dst: ap("[2001:db8::1]:7400")}, 57},
		{"v2 local", unhex(t, v2local), Header{Version: 2, Local: true}, 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, n, err := Parse(tc.in)
			if err != nil || h != tc.want || n != tc.n {
				t.Fatalf("Parse = %+v, %d, %v; want %+v, %d", h, n, err, tc.want, tc.n)
			}
		})
	}
	// The encoders write the same bytes.
	if got := AppendV2(nil, ap("203.0.113.7:51234"), ap("192.0.2.1:7400"), nil); !bytes.Equal(got, unhex(t, v2inet)) {
		t.Errorf("AppendV2 = %x", got)
	}
	if got := AppendV1(nil, ap("203.0.113.7:51234"), ap("192.0.2.1:7400")); string(got) != "PROXY TCP4 203.0.113.7 192.0.2.1 51234 7400\r\n" {
		t.Errorf("AppendV1 = %q", got)
	}
}

// TestParse_Malformed: every bad header is an error wrapping ErrMalformed
// that says where, never a panic, never "incomplete" (which would make
// the server wait for bytes that cannot help).
func TestParse_Malformed(t *testing.T) {
	sig := string(v2Sig)
	tests := []struct{ name, in, where string }{
		{"v1 no CRLF in 107 bytes", "PROXY TCP4 " + strings.Repeat("1", 100), "no CRLF"},
		{"v1 LF alone", "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "LF without CR"},
		{"v1 protocol", "PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n", "protocol"},
		{"v1 lower case", "PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n", "protocol"},
		{"v1 fields", "PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "fields"},
		{"v1 double space", "PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n", "fields"},
		{"v1 bad address", "PROXY TCP4 1.2.3.400 5.6.7.8 1 2\r\n", "address"},
		{"v1 v6 in TCP4", "PROXY TCP4 ::1 5.6.7.8 1 2\r\n", "does not match"},
		{"v1 v4 in TCP6", "PROXY TCP6 1.2.3.4 ::1 1 2\r\n", "does not match"},
		{"v1 mapped v4 in TCP6", "PROXY TCP6 ::ffff:1.2.3.4 ::1 1 2\r\n", "does not match"},
		{"v1 zone", "PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n", "zone"},
		{"v1 port range", "PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", "port"},
		{"v1 port leading zero", "PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n", "port"},
		{"v1 port sign", "PROXY TCP4 1.2.3.4 5.6.7.8 +80 2\r\n", "port"},
		{"v2 version", sig + "\x11\x11\x00\x0c" + strings.Repeat("\x00", 12), "version"},
		{"v2 command", sig + "\x22\x11\x00\x0c" + strings.Repeat("\x00", 12), "command"},
		{"v2 too long", sig + "\x21\x11\x08\x01", "exceeds"},
		{"v2 family", sig + "\x21\x41\x00\x0c", "family byte"},
		{"v2 transport", sig + "\x21\x13\x00\x0c", "family byte"},
		{"v2 short inet", sig + "\x21\x11\x00\x0b" + strings.Repeat("\x00", 11), "shorter"},
		{"v2 short inet6", sig + "\x21\x21\x00\x0c" + strings.Repeat("\x00", 12), "shorter"},
		{"v2 datagram", sig + "\x21\x12\x00\x0c" + strings.Repeat("\x00", 12), "transport"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, n, err := Parse([]byte(tc.in))
			if !errors.Is(err, ErrMalformed) || n != 0 || !strings.Contains(err.Error(), tc.where) {
				t.Fatalf("Parse(%q) = %d, %v; want ErrMalformed about %q", tc.in, n, err, tc.where)
			}
		})
	}
}

// TestParse_NotProxy: streams that start otherwise (a Sluice HELLO, an
// HTTP request, TLS) are not PROXY protocol, and that is known from
// their first byte.
func TestParse_NotProxy(t *testing.T) {
	for _, in := range []string{"\x00\x00\x00\x10\x01", "GET / HTTP/1.1\r\n", "\x16\x03\x01", "P", "PROXY\r\n", "\r\n\r\n\x01"} {
		_, _, err := Parse([]byte(in))
		want := ErrNotProxy
		if in == "P" {
			want = ErrIncomplete // a prefix of "PROXY "
		}
		if !errors.Is(err, want) {
			t.Errorf("Parse(%q) = %v, want %v", in, err, want)
		}
	}
	if _, _, err := Parse(nil); !errors.Is(err, ErrNotProxy) {
		t.Errorf("Parse(nil) = %v", err)
	}
}

// TestParse_EveryPrefixIsIncomplete: a header arriving a byte at a time
// is "incomplete" until its last byte, then decodes as in one piece.
func TestParse_EveryPrefixIsIncomplete(t *testing.T) {
	for _, full := range [][]byte{
		[]byte("PROXY TCP6 2001:db8::7 2001:db8::1 51234 7400\r\n"),
		AppendV2(nil, ap("203.0.113.7:1"), ap("192.0.2.1:2"), []byte{4, 0, 3, 1, 2, 3}),
		AppendV2(nil, ap("[::1]:1"), ap("[::2]:2"), nil),
	} {
		want, wn, err := Parse(full)
		if err != nil || wn != len(full) {
			t.Fatalf("Parse(%q) = %d, %v", full, wn, err)
		}
		for k := 1; k < len(full); k++ {
			if _, _, err := Parse(full[:k]); err != ErrIncomplete {
				t.Fatalf("prefix %d of %q: %v, want ErrIncomplete", k, full, err)
			}
		}
		if got, _, _ := Parse(full); got != want {
			t.Fatalf("decoded differently: %+v vs %+v", got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("PROXY TCP4 203.0.113.7 192.0.2.1 51234 7400\r\nx"))
	f.Add([]byte("PROXY TCP6 ::1 ::2 1 2\r\n"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(AppendV2(nil, ap("203.0.113.7:51234"), ap("192.0.2.1:7400"), []byte{4, 0, 1, 0}))
	f.Add(AppendV2(nil, ap("[2001:db8::7]:1"), ap("[2001:db8::1]:2"), nil))
	f.Add(AppendV2(nil, ap("1.2.3.4:1"), ap("[::1]:2"), nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := Parse(b)
		switch {
		case err == nil:
			if n <= 0 || n > len(b) || n > MaxLen {
				t.Fatalf("n = %d of %d bytes", n, len(b))
			}
			if h.Local == h.Src.IsValid() {
				t.Fatalf("Local %v with source %v", h.Local, h.Src)
			}
			// Property: the bytes after the header do not change it,
			// and every strict prefix of it is incomplete.
			h2, n2, err2 := Parse(b[:n])
			if err2 != nil || h2 != h || n2 != n {
				t.Fatalf("alone: %+v %d %v, with more: %+v %d", h2, n2, err2, h, n)
			}
			if n > 1 {
				if _, _, err := Parse(b[:n-1]); err != ErrIncomplete {
					t.Fatalf("prefix of %d: %v", n-1, err)
				}
			}
			// Round trip of addressed headers through the encoders.
			if !h.Local {
				enc := AppendV2(nil, h.Src, h.Dst, nil)
				if h.Version == 1 {
					enc = AppendV1(nil, h.Src, h.Dst)
				}
				h3, n3, err3 := Parse(enc)
				if err3 != nil || h3 != h || n3 != len(enc) {
					t.Fatalf("re-encoded %x: %+v %d %v, want %+v", enc, h3, n3, err3, h)
				}
			}
		case err == ErrIncomplete:
			if len(b) >= MaxLen {
				t.Fatalf("incomplete after %d bytes", len(b))
			}
		case err == ErrNotProxy || errors.Is(err, ErrMalformed):
			if n != 0 {
				t.Fatalf("n = %d with %v", n, err)
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}
