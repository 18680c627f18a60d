package ws

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// MaxRequest is the default bound on an upgrade request's size (request
// line and headers); browsers send well under 2 KiB.
const MaxRequest = 8 << 10

// Version is the only WebSocket version spoken (RFC 6455).
const Version = "13"

// Subprotocol is the subprotocol name Sluice selects when a client offers
// it. It is optional: a client that offers none gets none.
const Subprotocol = "sluice.v1"

// acceptGUID is appended to the client's key (RFC 6455 section 1.3).
const acceptGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// Request is a parsed upgrade request. Strings are copies.
type Request struct {
	Path   string // request target, as sent
	Host   string
	Origin string // "" when the client sent none (not a browser)
	Key    string // Sec-WebSocket-Key
	// Protocols are the offered subprotocols, in order.
	Protocols []string
	// Extensions are the offered extension names (parameters dropped);
	// Sluice negotiates none, so they are only reported.
	Extensions []string
	// Forwarded and XForwardedFor are the values of the Forwarded (RFC
	// 7239) and X-Forwarded-For header lines, in order, as sent: only a
	// server that trusts its peer as a proxy may believe them.
	Forwarded     []string
	XForwardedFor []string
}

// HandshakeError is a bad upgrade request with the HTTP status to answer.
type HandshakeError struct {
	Status int
	Msg    string
}

func (e *HandshakeError) Error() string { return fmt.Sprintf("ws: upgrade: %d: %s", e.Status, e.Msg) }

func hsErr(status int, format string, args ...any) error {
	return &HandshakeError{Status: status, Msg: fmt.Sprintf(format, args...)}
}

// ParseRequest parses the HTTP/1.1 upgrade request at the start of b and
// returns it with its size n (through the blank line). It returns
// ErrIncomplete while the blank line has not arrived and b is shorter
// than maxLen, and a *HandshakeError when the request is longer than
// maxLen or is not a valid WebSocket upgrade: status 400, or 426 for a
// Sec-WebSocket-Version other than 13. Any request path is accepted.
// Bytes after the request (a client's first frames) are not looked at.
func ParseRequest(b []byte, maxLen int) (req Request, n int, err error) {
	end := bytes.Index(b[:min(len(b), maxLen)], []byte("\r\n\r\n"))
	if end < 0 {
		if len(b) >= maxLen {
			return req, 0, hsErr(400, "upgrade request longer than %d bytes", maxLen)
		}
		return req, 0, ErrIncomplete
	}
	n = end + 4
	lines := strings.Split(string(b[:end]), "\r\n")
	method, rest, ok1 := strings.Cut(lines[0], " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || method == "" || target == "" || strings.ContainsRune(proto, ' ') {
		return req, 0, hsErr(400, "malformed request line %q", clip(lines[0]))
	}
	if method != "GET" {
		return req, 0, hsErr(400, "method %q: an upgrade is a GET", clip(method))
	}
	if !validHTTPVersion(proto) {
		return req, 0, hsErr(400, "%q: an upgrade needs HTTP/1.1", clip(proto))
	}
	req.Path = target
	var upgrade, connection, version, key string
	var haveHost, haveKey, haveVersion bool
	for _, ln := range lines[1:] {
		name, value, ok := strings.Cut(ln, ":")
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return req, 0, hsErr(400, "malformed header line %q", clip(ln))
		}
		value = strings.Trim(value, " \t")
		switch strings.ToLower(name) {
		case "host":
			if haveHost {
				return req, 0, hsErr(400, "more than one Host header")
			}
			haveHost, req.Host = true, value
		case "upgrade":
			upgrade = joinHeader(upgrade, value)
		case "connection":
			connection = joinHeader(connection, value)
		case "sec-websocket-key":
			if haveKey {
				return req, 0, hsErr(400, "more than one Sec-WebSocket-Key header")
			}
			haveKey, key = true, value
		case "sec-websocket-version":
			if haveVersion {
				return req, 0, hsErr(400, "more than one Sec-WebSocket-Version header")
			}
			haveVersion, version = true, value
		case "origin":
			req.Origin = value
		case "forwarded":
			req.Forwarded = append(req.Forwarded, value)
		case "x-forwarded-for":
			req.XForwardedFor = append(req.XForwardedFor, value)
		case "sec-websocket-protocol":
			req.Protocols = append(req.Protocols, tokens(value)...)
		case "sec-websocket-extensions":
			for _, e := range strings.Split(value, ",") {
				if name, _, _ := strings.Cut(e, ";"); strings.TrimSpace(name) != "" {
					req.Extensions = append(req.Extensions, strings.TrimSpace(name))
				}
			}
		}
	}
	switch {
	case !haveHost || req.Host == "":
		return req, 0, hsErr(400, "no Host header")
	case !hasToken(upgrade, "websocket"):
		return req, 0, hsErr(400, "no \"Upgrade: websocket\" header")
	case !hasToken(connection, "upgrade"):
		return req, 0, hsErr(400, "no \"Connection: Upgrade\" header")
	case !haveVersion || version != Version:
		return req, 0, hsErr(426, "Sec-WebSocket-Version %q: this server speaks version %s", clip(version), Version)
	}
	if k, err := base64.StdEncoding.DecodeString(key); err != nil || len(k) != 16 {
		return req, 0, hsErr(400, "Sec-WebSocket-Key %q is not 16 bytes in base64", clip(key))
	}
	req.Key = key
	return req, n, nil
}

func validHTTPVersion(p string) bool {
	v, ok := strings.CutPrefix(p, "HTTP/")
	if !ok {
		return false
	}
	maj, mnr, ok := strings.Cut(v, ".")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(mnr)
	return ok && err1 == nil && err2 == nil && (a > 1 || (a == 1 && b >= 1))
}

func joinHeader(a, b string) string {
	if a == "" {
		return b
	}
	return a + "," + b
}

func tokens(v string) []string {
	var out []string
	for _, t := range strings.Split(v, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

func hasToken(v, tok string) bool {
	for _, t := range tokens(v) {
		if strings.EqualFold(t, tok) {
			return true
		}
	}
	return false
}

// clip shortens peer text quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// AcceptKey is the Sec-WebSocket-Accept value for a client's key.
func AcceptKey(key string) string {
	h := sha1.Sum([]byte(key + acceptGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// SelectProtocol returns Subprotocol when the client offered it, else "".
func (r *Request) SelectProtocol() string {
	for _, p := range r.Protocols {
		if p == Subprotocol {
			return Subprotocol
		}
	}
	return ""
}

// AppendAccept appends the 101 answer to req; protocol is the selected
// subprotocol ("" for none).
func AppendAccept(dst []byte, req *Request, protocol string) []byte {
	dst = append(dst, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	dst = append(dst, AcceptKey(req.Key)...)
	if protocol != "" {
		dst = append(dst, "\r\nSec-WebSocket-Protocol: "...)
		dst = append(dst, protocol...)
	}
	return append(dst, "\r\n\r\n"...)
}

// AppendReject appends an HTTP error answer with status and a plain text
// body msg, closing the connection; a 426 names the version spoken.
func AppendReject(dst []byte, status int, msg string) []byte {
	body := msg + "\n"
	dst = fmt.Appendf(dst, "HTTP/1.1 %d %s\r\n", status, statusText(status))
	if status == 426 {
		dst = append(dst, "Sec-WebSocket-Version: "+Version+"\r\n"...)
	}
	dst = fmt.Appendf(dst, "Content-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(body))
	return append(dst, body...)
}

func statusText(status int) string {
	switch status {
	case 400:
		return "Bad Request"
	case 403:
		return "Forbidden"
	case 408:
		return "Request Timeout"
	case 426:
		return "Upgrade Required"
	case 503:
		return "Service Unavailable"
	}
	return "Error"
}

// OriginAllowed reports whether a browser page from origin may connect.
// A request without Origin is not from a browser page and is allowed
// (authentication is the token in HELLO). allow holds exact origins
// ("https://app.example.com", compared case-insensitively, with the port
// when not the scheme's default) or "*" for any. An empty allow list
// admits the pages served by the same host as the request's Host (any
// port: the console is served by the HTTP listener, another port; the
// names of the loopback, localhost, 127.0.0.1 and ::1, count as one).
func OriginAllowed(origin, host string, allow []string) bool {
	if origin == "" {
		return true
	}
	if len(allow) == 0 {
		u, err := url.Parse(origin)
		if err != nil || u.Host == "" {
			return false
		}
		oh, rh := u.Hostname(), hostname(host)
		return strings.EqualFold(oh, rh) || (isLoopback(oh) && isLoopback(rh))
	}
	for _, a := range allow {
		if a == "*" || strings.EqualFold(strings.TrimRight(a, "/"), origin) {
			return true
		}
	}
	return false
}

// isLoopback reports whether h names this machine's loopback: localhost
// and 127.0.0.1 are one host to a user.
func isLoopback(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// hostname strips the port from a Host header value.
func hostname(host string) string {
	if u, err := url.Parse("http://" + host); err == nil {
		return u.Hostname()
	}
	return host
}
