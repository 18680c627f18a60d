// Package console serves Sluice's web console on the HTTP listener:
// the page and its scripts, embedded from static/ (index.html,
// console.js and sluice.js, the TypeScript SDK's committed build, so a
// server built with plain `go build` serves it with no Node toolchain),
// and two JSON endpoints the page reads:
//
//	GET /console/config.json  {"ws":"ws://HOST:PORT/"|null,"auth":bool,"node":NAME}
//	GET /console/api/status   {"node":..,"members":[..],"channels":[..]}
//
// The live tail of a channel runs in the browser over the WebSocket
// gateway with the SDK; these endpoints only describe the node.
//
// The package knows nothing of the engine: the server passes a Source.
package console

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// Static returns the embedded files (rooted at static/).
func Static() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	return sub
}

// Load is a member's load: what it reports for placement.
type Load struct {
	Streamlets    int64   `json:"streamlets"`
	Channels      int64   `json:"channels"`
	Connections   int64   `json:"connections"`
	MsgsInPerSec  float64 `json:"msgsInPerSec"`
	BytesInPerSec float64 `json:"bytesInPerSec"`
}

// Member is one node of the cluster (the node itself when alone).
type Member struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`  // client address
	State string `json:"state"` // alive, suspect, dead, left, unreachable
	Load  Load   `json:"load"`
}

// Channel is one channel's traffic.
type Channel struct {
	Name        string  `json:"name"`
	MsgsPerSec  float64 `json:"msgsPerSec"`
	BytesPerSec float64 `json:"bytesPerSec"`
	Subscribers int64   `json:"subscribers"`
}

// Status is what /console/api/status returns.
type Status struct {
	Node     string    `json:"node"`
	Members  []Member  `json:"members"`
	Channels []Channel `json:"channels"`
}

// MaxChannels is how many channels Status lists: the busiest.
const MaxChannels = 20

// ErrUnauthorized is returned by Source.Authorize for a missing or
// refused token.
var ErrUnauthorized = errors.New("console: token not accepted")

// Source is the server as the console sees it. Its methods are called
// from HTTP handler goroutines concurrently.
type Source interface {
	// Node is the node's name.
	Node() string
	// WSAddr is the WebSocket listener's HOST:PORT ("" = none) and
	// whether it serves TLS.
	WSAddr() (addr string, tls bool)
	// AuthRequired reports whether a client must present a token.
	AuthRequired() bool
	// Authorize checks a token (hasToken false: none was sent) and
	// returns which channels its role may see (those it may subscribe
	// to), or an error wrapping ErrUnauthorized.
	Authorize(token []byte, hasToken bool) (canSee func(channel string) bool, err error)
	// Status returns the members and every channel with traffic, in any
	// order; the handler sorts, filters and cuts the list.
	Status(ctx context.Context) (Status, error)
}

// Config is what /console/config.json returns.
type Config struct {
	WS   *string `json:"ws"`
	Auth bool    `json:"auth"`
	Node string  `json:"node"`
}

// statusTimeout bounds how long a status request waits for the server.
const statusTimeout = 3 * time.Second

// Handler serves the console under /console/ (mount it at "/console/";
// "/console" redirects there). Safe for concurrent use.
func Handler(src Source) http.Handler {
	mux := http.NewServeMux()
	files := http.FileServerFS(Static())
	mux.Handle("GET /console/", http.StripPrefix("/console", noListing(files)))
	mux.HandleFunc("GET /console/config.json", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, configFor(src, r.Host))
	})
	mux.HandleFunc("GET /console/api/status", func(w http.ResponseWriter, r *http.Request) {
		token, has := bearer(r)
		canSee, err := src.Authorize(token, has)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			http.Error(w, "a token the server accepts is required: Authorization: Bearer TOKEN", http.StatusUnauthorized)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), statusTimeout)
		defer cancel()
		st, err := src.Status(ctx)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, Busiest(st, canSee, MaxChannels))
	})
	mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusMovedPermanently)
	})
	return mux
}

// Busiest keeps the channels canSee admits, the busiest (by messages,
// then bytes per second, then subscribers, then name) first, at most n.
// Members and channel slices are never nil (JSON [] rather than null).
func Busiest(st Status, canSee func(string) bool, n int) Status {
	out := st
	out.Channels = make([]Channel, 0, min(len(st.Channels), n))
	var keep []Channel
	for _, c := range st.Channels {
		if canSee == nil || canSee(c.Name) {
			keep = append(keep, c)
		}
	}
	sortChannels(keep)
	out.Channels = append(out.Channels, keep[:min(len(keep), n)]...)
	if out.Members == nil {
		out.Members = []Member{}
	}
	return out
}

func sortChannels(cs []Channel) {
	slices.SortFunc(cs, func(a, b Channel) int {
		switch {
		case a.MsgsPerSec != b.MsgsPerSec:
			return cmp.Compare(b.MsgsPerSec, a.MsgsPerSec)
		case a.BytesPerSec != b.BytesPerSec:
			return cmp.Compare(b.BytesPerSec, a.BytesPerSec)
		case a.Subscribers != b.Subscribers:
			return cmp.Compare(b.Subscribers, a.Subscribers)
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// configFor builds config.json for a request to host: a WebSocket
// listener on an unspecified address (0.0.0.0, [::]) is reached at the
// host name the browser used.
func configFor(src Source, reqHost string) Config {
	c := Config{Auth: src.AuthRequired(), Node: src.Node()}
	addr, secure := src.WSAddr()
	if addr == "" {
		return c
	}
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() || host == "" {
			if h := hostOnly(reqHost); h != "" {
				host = h
			}
		}
		addr = net.JoinHostPort(host, port)
	}
	scheme := "ws"
	if secure {
		scheme = "wss"
	}
	u := (&url.URL{Scheme: scheme, Host: addr, Path: "/"}).String()
	c.WS = &u
	return c
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

// bearer returns the token of an "Authorization: Bearer TOKEN" header.
func bearer(r *http.Request) ([]byte, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return nil, false
	}
	return []byte(strings.TrimSpace(tok)), true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// noListing answers 404 for a directory without index.html instead of
// listing it, and asks browsers to revalidate the files.
func noListing(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimPrefix(r.URL.Path, "/")
		if p == "" || strings.HasSuffix(p, "/") {
			if _, err := fs.Stat(Static(), p+"index.html"); err != nil {
				http.Error(w, "the console page is not in this build (console/static/index.html)", http.StatusNotFound)
				return
			}
		}
		w.Header().Set("Cache-Control", "no-cache")
		// The files are public code: pages of any origin may import the
		// SDK module (module scripts are fetched with CORS).
		w.Header().Set("Access-Control-Allow-Origin", "*")
		h.ServeHTTP(w, r)
	})
}
