package ws_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
	"github.com/sluice-rtm/sluice/ws"
)

var key = [4]byte{0x37, 0xfa, 0x21, 0x3d}

// RFC 6455 section 1.3's example.
func TestAcceptKeyRFCExample(t *testing.T) {
	if got := ws.AcceptKey("dGhlIHNhbXBsZSBub25jZQ=="); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("AcceptKey = %q", got)
	}
}

// RFC 6455 section 5.7's examples, byte for byte.
func TestFramesRFCExamples(t *testing.T) {
	if got := ws.AppendFrame(nil, ws.OpText, []byte("Hello")); !bytes.Equal(got, []byte{0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f}) {
		t.Fatalf("unmasked Hello = % x", got)
	}
	masked := []byte{0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58}
	if got := ws.AppendMaskedFrame(nil, true, ws.OpText, []byte("Hello"), key); !bytes.Equal(got, masked) {
		t.Fatalf("masked Hello = % x", got)
	}
	r := ws.Reader{Max: 100, Text: true}
	ev, n, err := r.Next(append([]byte(nil), masked...))
	if err != nil || n != len(masked) || ev.Op != ws.OpText || string(ev.Payload) != "Hello" {
		t.Fatalf("Next = %+v %d %v", ev, n, err)
	}
	// 256 and 65536 byte binary frames use the 16- and 64-bit lengths.
	if got := ws.AppendHeader(nil, true, ws.OpBinary, 256, nil); !bytes.Equal(got, []byte{0x82, 0x7e, 0x01, 0x00}) {
		t.Fatalf("256-byte header = % x", got)
	}
	if got := ws.AppendHeader(nil, true, ws.OpBinary, 65536, nil); !bytes.Equal(got, []byte{0x82, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0}) {
		t.Fatalf("64 KiB header = % x", got)
	}
	for _, n := range []int{0, 125, 126, 65535, 65536} {
		for _, m := range []bool{false, true} {
			var mk *[4]byte
			if m {
				mk = &key
			}
			if got, want := len(ws.AppendHeader(nil, true, ws.OpBinary, n, mk)), ws.HeaderLen(n, m); got != want {
				t.Errorf("n=%d masked=%v: header %d bytes, HeaderLen %d", n, m, got, want)
			}
		}
	}
}

func TestMaskMatchesBytewise(t *testing.T) {
	for pos := 0; pos < 4; pos++ {
		for n := 0; n < 40; n++ {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(i * 7)
			}
			want := append([]byte(nil), b...)
			for i := range want {
				want[i] ^= key[(pos+i)%4]
			}
			if end := ws.Mask(b, key, pos); end != pos+n || !bytes.Equal(b, want) {
				t.Fatalf("pos=%d n=%d: % x, want % x", pos, n, b, want)
			}
		}
	}
}

func cframe(fin bool, op ws.Op, p string) []byte {
	return ws.AppendMaskedFrame(nil, fin, op, []byte(p), key)
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// TestReaderRejects: every malformed class, with its close code.
func TestReaderRejects(t *testing.T) {
	long := strings.Repeat("x", 101)
	cases := []struct {
		name string
		in   []byte
		code ws.Code
		is   error
	}{
		{"text message", cframe(true, ws.OpText, "hi"), ws.CodeUnsupportedData, ws.ErrUnsupportedData},
		{"unmasked", ws.AppendFrame(nil, ws.OpBinary, []byte("hi")), ws.CodeProtocolError, ws.ErrProtocol},
		{"oversize", cframe(true, ws.OpBinary, long), ws.CodeTooBig, ws.ErrTooLarge},
		{"oversize header only", ws.AppendHeader(nil, true, ws.OpBinary, 1<<40, &key), ws.CodeTooBig, ws.ErrTooLarge},
		{"oversize fragments", cat(cframe(false, ws.OpBinary, long[:60]), cframe(false, ws.OpContinuation, long[:41])), ws.CodeTooBig, ws.ErrTooLarge},
		{"reserved bit", func() []byte { b := cframe(true, ws.OpBinary, "x"); b[0] |= 0x40; return b }(), ws.CodeProtocolError, ws.ErrProtocol},
		{"reserved opcode", func() []byte { b := cframe(true, ws.OpBinary, "x"); b[0] = 0x83; return b }(), ws.CodeProtocolError, ws.ErrProtocol},
		{"fragmented ping", cframe(false, ws.OpPing, "x"), ws.CodeProtocolError, ws.ErrProtocol},
		{"long ping", []byte{0x89, 0xfe, 0, 126, 1, 2, 3, 4}, ws.CodeProtocolError, ws.ErrProtocol},
		{"continuation first", cframe(true, ws.OpContinuation, "x"), ws.CodeProtocolError, ws.ErrProtocol},
		{"message inside message", cat(cframe(false, ws.OpBinary, "a"), cframe(true, ws.OpBinary, "b")), ws.CodeProtocolError, ws.ErrProtocol},
		{"non-minimal 16-bit length", []byte{0x82, 0xfe, 0, 5, 1, 2, 3, 4}, ws.CodeProtocolError, ws.ErrProtocol},
		{"non-minimal 64-bit length", []byte{0x82, 0xff, 0, 0, 0, 0, 0, 0, 0, 5}, ws.CodeProtocolError, ws.ErrProtocol},
		{"64-bit top bit", []byte{0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0}, ws.CodeProtocolError, ws.ErrProtocol},
		{"close 1 byte", cframe(true, ws.OpClose, "\x03"), ws.CodeProtocolError, ws.ErrProtocol},
		{"close code 1005", cframe(true, ws.OpClose, "\x03\xed"), ws.CodeProtocolError, ws.ErrProtocol},
		{"close reason not UTF-8", cframe(true, ws.OpClose, "\x03\xe8\xff"), ws.CodeInvalidPayload, ws.ErrInvalidPayload},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := ws.Reader{Max: 100}
			b := tc.in
			var err error
			for err == nil {
				var n int
				_, n, err = r.Next(b)
				b = b[n:]
			}
			if !errors.Is(err, tc.is) || ws.CodeOf(err) != tc.code {
				t.Fatalf("err %v (code %d), want %v (code %d)", err, ws.CodeOf(err), tc.is, tc.code)
			}
			if _, _, again := r.Next(cframe(true, ws.OpBinary, "ok")); again != err {
				t.Fatalf("error not sticky: %v", again)
			}
		})
	}
	t.Run("too many fragments", func(t *testing.T) {
		r := ws.Reader{Max: 1 << 20}
		b := cframe(false, ws.OpBinary, "")
		for i := 0; i < ws.MaxFragments; i++ {
			b = append(b, cframe(false, ws.OpContinuation, "")...)
		}
		var err error
		for err == nil {
			var n int
			_, n, err = r.Next(b)
			b = b[n:]
		}
		if ws.CodeOf(err) != ws.CodeTooBig {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("masked frame to a client", func(t *testing.T) {
		r := ws.Reader{Max: 100, Client: true}
		if _, _, err := r.Next(cframe(true, ws.OpBinary, "x")); ws.CodeOf(err) != ws.CodeProtocolError {
			t.Fatalf("err %v", err)
		}
	})
}

// An oversize header is refused before its payload arrives.
func TestReaderChecksLengthBeforeBuffering(t *testing.T) {
	r := ws.Reader{Max: 100}
	h := ws.AppendHeader(nil, true, ws.OpBinary, 1000, &key)
	if _, _, err := r.Next(h); !errors.Is(err, ws.ErrTooLarge) {
		t.Fatalf("err %v, want ErrTooLarge with only the header present", err)
	}
}

func TestReaderFragmentsAndControl(t *testing.T) {
	in := cat(
		cframe(false, ws.OpBinary, "he"),
		cframe(true, ws.OpPing, "p1"), // control frames may come between fragments
		cframe(false, ws.OpContinuation, "ll"),
		cframe(true, ws.OpContinuation, "o"),
		cframe(true, ws.OpBinary, "second"),
		cframe(true, ws.OpPong, ""),
		cframe(true, ws.OpClose, "\x03\xe8bye"),
	)
	type got struct {
		op ws.Op
		p  string
	}
	var evs []got
	r := ws.Reader{Max: 100}
	b := in
	for len(b) > 0 {
		ev, n, err := r.Next(b)
		if err != nil {
			t.Fatal(err)
		}
		b = b[n:]
		if ev.Op != 0 {
			p := string(ev.Payload)
			if ev.Op == ws.OpClose {
				p = ev.Reason
				if ev.Code != ws.CodeNormal {
					t.Fatalf("close code %d", ev.Code)
				}
			}
			evs = append(evs, got{ev.Op, p})
		}
	}
	want := []got{{ws.OpPing, "p1"}, {ws.OpBinary, "hello"}, {ws.OpBinary, "second"}, {ws.OpPong, ""}, {ws.OpClose, "bye"}}
	if len(evs) != len(want) {
		t.Fatalf("events %v, want %v", evs, want)
	}
	for i := range want {
		if evs[i] != want[i] {
			t.Fatalf("event %d = %v, want %v", i, evs[i], want[i])
		}
	}
	// Every strict prefix of a frame is incomplete, never an error.
	f := cframe(true, ws.OpBinary, strings.Repeat("y", 300))
	for i := 0; i < len(f); i++ {
		r := ws.Reader{Max: 1000}
		if _, n, err := r.Next(append([]byte(nil), f[:i]...)); err != ws.ErrIncomplete || n != 0 {
			t.Fatalf("prefix %d: n=%d err=%v", i, n, err)
		}
	}
}

func TestParseCloseCodes(t *testing.T) {
	for code, ok := range map[uint16]bool{999: false, 1000: true, 1003: true, 1004: false, 1005: false, 1006: false,
		1007: true, 1011: true, 1012: false, 1015: false, 2999: false, 3000: true, 4999: true, 5000: false} {
		_, _, err := ws.ParseClose([]byte{byte(code >> 8), byte(code)})
		if (err == nil) != ok {
			t.Errorf("code %d: err %v", code, err)
		}
	}
	c, reason, err := ws.ParseClose(ws.ClosePayload(ws.CodeTooBig, strings.Repeat("é", 100)))
	if err != nil || c != ws.CodeTooBig || len(reason) > 123 {
		t.Fatalf("long reason: %d %q %v", c, reason, err)
	}
}

const goodReq = "GET /any/path?x=1 HTTP/1.1\r\nHost: example.com:7001\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: http://example.com:9090\r\n" +
	"Sec-WebSocket-Protocol: chat, sluice.v1\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"

func TestParseRequest(t *testing.T) {
	extra := "\x82\x80...."
	req, n, err := ws.ParseRequest([]byte(goodReq+extra), ws.MaxRequest)
	if err != nil || n != len(goodReq) {
		t.Fatalf("n=%d err=%v", n, err)
	}
	if req.Path != "/any/path?x=1" || req.Host != "example.com:7001" || req.Origin != "http://example.com:9090" ||
		req.Key != "dGhlIHNhbXBsZSBub25jZQ==" || req.SelectProtocol() != ws.Subprotocol ||
		len(req.Extensions) != 1 || req.Extensions[0] != "permessage-deflate" {
		t.Fatalf("req %+v", req)
	}
	acc := string(ws.AppendAccept(nil, &req, req.SelectProtocol()))
	if !strings.HasPrefix(acc, "HTTP/1.1 101 ") || !strings.Contains(acc, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n") ||
		!strings.Contains(acc, "Sec-WebSocket-Protocol: sluice.v1\r\n") || strings.Contains(acc, "deflate") || !strings.HasSuffix(acc, "\r\n\r\n") {
		t.Fatalf("accept %q", acc)
	}
	for i := 0; i < len(goodReq); i++ {
		if _, _, err := ws.ParseRequest([]byte(goodReq[:i]), ws.MaxRequest); err != ws.ErrIncomplete {
			t.Fatalf("prefix %d: %v", i, err)
		}
	}
}

// TestParseRequest_ForwardingHeaders: Forwarded and X-Forwarded-For
// lines are kept as sent, in order, for the server to believe or not.
func TestParseRequest_ForwardingHeaders(t *testing.T) {
	r := strings.TrimSuffix(goodReq, "\r\n") + "X-Forwarded-For: 1.1.1.1, 2.2.2.2\r\nforwarded: for=3.3.3.3\r\nX-FORWARDED-FOR: 4.4.4.4\r\n\r\n"
	req, _, err := ws.ParseRequest([]byte(r), ws.MaxRequest)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(req.XForwardedFor, "|") != "1.1.1.1, 2.2.2.2|4.4.4.4" || strings.Join(req.Forwarded, "|") != "for=3.3.3.3" {
		t.Fatalf("XFF %q, Forwarded %q", req.XForwardedFor, req.Forwarded)
	}
	if req, _, _ := ws.ParseRequest([]byte(goodReq), ws.MaxRequest); req.XForwardedFor != nil || req.Forwarded != nil {
		t.Fatalf("without the headers: %+v", req)
	}
}

func TestParseRequestRejects(t *testing.T) {
	edit := func(old, new string) string { return strings.Replace(goodReq, old, new, 1) }
	cases := map[string]struct {
		req    string
		status int
	}{
		"POST":            {edit("GET", "POST"), 400},
		"HTTP/1.0":        {edit("HTTP/1.1", "HTTP/1.0"), 400},
		"no upgrade":      {edit("Upgrade: websocket\r\n", ""), 400},
		"upgrade h2c":     {edit("Upgrade: websocket", "Upgrade: h2c"), 400},
		"no connection":   {edit("Connection: keep-alive, Upgrade\r\n", ""), 400},
		"no host":         {edit("Host: example.com:7001\r\n", ""), 400},
		"two hosts":       {edit("Host: example.com:7001\r\n", "Host: a\r\nHost: b\r\n"), 400},
		"short key":       {edit("dGhlIHNhbXBsZSBub25jZQ==", "c2hvcnQ="), 400},
		"no key":          {edit("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", ""), 400},
		"version 8":       {edit("Version: 13", "Version: 8"), 426},
		"no version":      {edit("Sec-WebSocket-Version: 13\r\n", ""), 426},
		"bad header line": {edit("Upgrade:", "Upgrade"), 400},
		"garbage":         {"\x16\x03\x01\x02\x00\r\n\r\n", 400},
		"too long":        {"GET / HTTP/1.1\r\nX: " + strings.Repeat("a", ws.MaxRequest), 400},
	}
	for name, tc := range cases {
		_, _, err := ws.ParseRequest([]byte(tc.req), ws.MaxRequest)
		var he *ws.HandshakeError
		if !errors.As(err, &he) || he.Status != tc.status {
			t.Errorf("%s: err %v, want status %d", name, err, tc.status)
		}
	}
	rej := string(ws.AppendReject(nil, 426, "version"))
	if !strings.HasPrefix(rej, "HTTP/1.1 426 Upgrade Required\r\n") || !strings.Contains(rej, "Sec-WebSocket-Version: 13\r\n") {
		t.Fatalf("reject %q", rej)
	}
}

func TestOriginAllowed(t *testing.T) {
	cases := []struct {
		origin, host string
		allow        []string
		ok           bool
	}{
		{"", "h:1", nil, true},
		{"http://h:9090", "h:7001", nil, true},
		{"http://evil.example", "h:7001", nil, false},
		{"null", "h:7001", nil, false},
		{"https://app.example.com", "h", []string{"https://app.example.com"}, true},
		{"HTTPS://APP.example.com", "h", []string{"https://app.example.com/"}, true},
		{"https://app.example.com:8443", "h", []string{"https://app.example.com"}, false},
		{"http://h:9090", "h:7001", []string{"https://app.example.com"}, false},
		{"http://anything", "h", []string{"*"}, true},
		{"http://[::1]:9090", "[::1]:7001", nil, true},
		{"http://localhost:8000", "127.0.0.1:7401", nil, true},
		{"http://127.0.0.1:8000", "[::1]:7401", nil, true},
		{"http://localhost.evil.example", "127.0.0.1:7401", nil, false},
		{"http://10.0.0.5:8000", "127.0.0.1:7401", nil, false},
	}
	for _, tc := range cases {
		if got := ws.OriginAllowed(tc.origin, tc.host, tc.allow); got != tc.ok {
			t.Errorf("OriginAllowed(%q, %q, %v) = %v", tc.origin, tc.host, tc.allow, got)
		}
	}
}

// TestProtocolExample: the worked example of PROTOCOL.md 10.2.
func TestProtocolExample(t *testing.T) {
	pong := wire.AppendPong(nil, 7)
	if !bytes.Equal(pong, []byte{0, 0, 0, 0, 0x0b, 0, 0, 0, 0, 7}) {
		t.Fatalf("PONG % x", pong)
	}
	if got := ws.AppendFrame(nil, ws.OpBinary, pong); !bytes.Equal(got, append([]byte{0x82, 0x0a}, pong...)) {
		t.Fatalf("server message % x", got)
	}
	want := []byte{0x82, 0x8a, 0x37, 0xfa, 0x21, 0x3d, 0x37, 0xfa, 0x21, 0x3d, 0x3d, 0xfa, 0x21, 0x3d, 0x37, 0xfd}
	if got := ws.AppendMaskedFrame(nil, true, ws.OpBinary, wire.AppendPing(nil, 7), key); !bytes.Equal(got, want) {
		t.Fatalf("client message % x, want % x", got, want)
	}
}
