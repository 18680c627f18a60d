package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-rtm/sluice/engine"
	"github.com/sluice-rtm/sluice/internal/testcert"
)

// authDoc is a configuration file granting token tok publish and
// subscribe on chat.>.
func authDoc(extra string, toks ...string) string {
	var b strings.Builder
	b.WriteString("listen = \"127.0.0.1:0\"\nloops = 1\nmetrics-listen = \"127.0.0.1:0\"\n" + extra)
	b.WriteString("[[auth.roles]]\nname = \"chat\"\npublish = [\"chat.>\"]\nsubscribe = [\"chat.>\"]\n")
	for i, tok := range toks {
		fmt.Fprintf(&b, "[[auth.tokens]]\nname = \"t%d\"\nhash = %q\nrole = \"chat\"\n", i, engine.HashToken([]byte(tok)))
	}
	return b.String()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serveRun is `sluice serve` running in-process.
type serveRun struct {
	logs      *watchWriter
	interrupt context.CancelFunc
	done      chan int
	addr      string
	tlsAddr   string
	metrics   string
}

func startServe(t *testing.T, args ...string) *serveRun {
	t.Helper()
	ctx := ctxE2E(t)
	srvCtx, interrupt := context.WithCancel(ctx)
	r := &serveRun{logs: newWatchWriter("msg=ready"), interrupt: interrupt, done: make(chan int, 1)}
	go func() {
		r.done <- run(srvCtx, stdio{in: strings.NewReader(""), out: io.Discard, err: r.logs}, append([]string{"serve"}, args...))
	}()
	select {
	case <-r.logs.seen:
	case code := <-r.done:
		t.Fatalf("serve exited %d: %s", code, r.logs.String())
	case <-ctx.Done():
		t.Fatal("serve did not start")
	}
	m := regexp.MustCompile(`msg=ready addr=(\S+) tls_addr=(\S*) metrics_addr=(\S*)`).FindStringSubmatch(r.logs.String())
	if m == nil {
		t.Fatalf("no addresses in %q", r.logs.String())
	}
	r.addr, r.tlsAddr, r.metrics = m[1], m[2], m[3]
	t.Cleanup(func() {
		interrupt()
		if code := <-r.done; code != exitOK {
			t.Errorf("serve exited %d: %s", code, r.logs.String())
		}
	})
	return r
}

// metric fetches one sample from the metrics endpoint.
func metric(t *testing.T, addr, sample string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			return v
		}
	}
	t.Fatalf("no sample %s", sample)
	return ""
}

// TestServeConfigAuthAndSIGHUP runs `serve --config` with an [auth]
// table, checks pub with no, wrong and right tokens, then rotates the
// token by rewriting the file and sending SIGHUP to the process.
func TestServeConfigAuthAndSIGHUP(t *testing.T) {
	ctx := ctxE2E(t)
	path := filepath.Join(t.TempDir(), "sluice.toml")
	writeFile(t, path, authDoc("", "old-token-0123456789"))
	r := startServe(t, "--config", path, "--name", "from-flag")

	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"chat.a", "x"}, exitFail, "UNAUTHENTICATED"},
		{[]string{"--token", "wrong", "chat.a", "x"}, exitFail, "UNAUTHENTICATED"},
		{[]string{"--token", "old-token-0123456789", "other", "x"}, exitFail, "FORBIDDEN"},
		{[]string{"--token", "old-token-0123456789", "chat.a", "x"}, exitOK, ""},
	} {
		code, _, errs := runCmd(ctx, "", append([]string{"pub", "--server", r.addr}, tc.args...)...)
		if code != tc.code || !strings.Contains(errs, tc.err) {
			t.Fatalf("pub %q: code %d stderr %q; want %d %q", tc.args, code, errs, tc.code, tc.err)
		}
	}
	// The token can come from the environment too.
	t.Setenv(tokenEnv, "old-token-0123456789")
	if code, _, errs := runCmd(ctx, "", "sub", "--server", r.addr, "chat.a", "--from", "earliest", "--count", "1"); code != exitOK {
		t.Fatalf("sub with $%s: %d %s", tokenEnv, code, errs)
	}
	t.Setenv(tokenEnv, "")

	// Rotate: the old token is replaced by a new one.
	writeFile(t, path, authDoc("", "new-token-0123456789"))
	reloaded := newWatchWriter("msg=\"reloaded auth\"")
	r.logs.mu.Lock()
	r.logs.marker, r.logs.closed, r.logs.seen = reloaded.marker, false, reloaded.seen
	r.logs.mu.Unlock()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.logs.seen:
	case <-ctx.Done():
		t.Fatalf("no reload logged: %s", r.logs.String())
	}
	if code, _, errs := runCmd(ctx, "", "pub", "--server", r.addr, "--token", "old-token-0123456789", "chat.a", "x"); code != exitFail || !strings.Contains(errs, "UNAUTHENTICATED") {
		t.Fatalf("old token after rotation: %d %s", code, errs)
	}
	if code, _, errs := runCmd(ctx, "", "pub", "--server", r.addr, "--token", "new-token-0123456789", "chat.a", "y"); code != exitOK {
		t.Fatalf("new token after rotation: %d %s", code, errs)
	}
	if v := metric(t, r.metrics, "sluice_auth_reloads_total"); v != "1" {
		t.Fatalf("sluice_auth_reloads_total %s, want 1", v)
	}
	if v := metric(t, r.metrics, `sluice_auth_failures_total{kind="unauthenticated"}`); v != "3" {
		t.Fatalf("unauthenticated failures %s, want 3", v)
	}
	if v := metric(t, r.metrics, `sluice_node_connections{node="from-flag"}`); v != "0" {
		t.Fatalf("node label or connections wrong: %s", v)
	}
}

// TestReloadAuth calls the SIGHUP handler's function directly: a broken
// file keeps the current setup, a good one replaces it.
func TestReloadAuth(t *testing.T) {
	ctx := ctxE2E(t)
	path := filepath.Join(t.TempDir(), "s.toml")
	writeFile(t, path, authDoc("", "tok-a-0123456789"))
	c := config2opts(t, path)
	srv, err := engine.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	log := slog.New(slog.DiscardHandler)
	pub := func(tok string) int {
		code, _, _ := runCmd(ctx, "", "pub", "--server", srv.Addr(), "--token", tok, "chat.x", "m")
		return code
	}
	if pub("tok-a-0123456789") != exitOK || pub("tok-b-0123456789") != exitFail {
		t.Fatal("initial setup not in force")
	}
	writeFile(t, path, authDoc("bogus-key = 1\n", "tok-b-0123456789"))
	if reloadAuth(log, srv, path) {
		t.Fatal("a file with an unknown key was installed")
	}
	if pub("tok-a-0123456789") != exitOK {
		t.Fatal("a failed reload changed the setup")
	}
	writeFile(t, path, authDoc("", "tok-b-0123456789"))
	if !reloadAuth(log, srv, path) {
		t.Fatal("reload failed")
	}
	if pub("tok-a-0123456789") != exitFail || pub("tok-b-0123456789") != exitOK {
		t.Fatal("new setup not in force")
	}
	if reloadAuth(log, srv, "") {
		t.Fatal("reload without a config file reported success")
	}
}

// config2opts loads a configuration file into engine options for a test.
func config2opts(t *testing.T, path string) engine.Options {
	t.Helper()
	fs := newFlagSet("serve", "", "")
	cfg, _, err := parseServe(fs, []string{"--config", path, "--metrics-listen", ""})
	if err != nil {
		t.Fatal(err)
	}
	cfg.opts.Logger = slog.New(slog.DiscardHandler)
	return cfg.opts
}

func TestParseServeConfigPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.toml")
	writeFile(t, path, "ttl = \"7s\"\nmax-conns = 11\nlog-level = \"warn\"\n")
	fs := newFlagSet("serve", "", "")
	cfg, _, err := parseServe(fs, []string{"--max-conns", "12", "--config", path})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.opts.TTL.String() != "7s" || cfg.opts.MaxConns != 12 || cfg.level != slog.LevelWarn {
		t.Fatalf("got ttl %v max-conns %d level %v; want the file's ttl and level, the flag's max-conns", cfg.opts.TTL, cfg.opts.MaxConns, cfg.level)
	}
	writeFile(t, path, "max-cons = 1\n")
	if _, _, err := parseServe(newFlagSet("serve", "", ""), []string{"--config", path}); err == nil ||
		!strings.Contains(err.Error(), "max-cons") || !strings.Contains(err.Error(), path) {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestTLSEndToEndCLI(t *testing.T) {
	ctx := ctxE2E(t)
	dir := t.TempDir()
	set, err := testcert.New("sluice.test")
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, key, err := set.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	other, err := testcert.New("sluice.test")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, _, _, err := other.WriteFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := startServe(t, "--listen", "127.0.0.1:0", "--loops", "1", "--tls-listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key)
	tlsArgs := []string{"--server", r.tlsAddr, "--tls-ca", ca, "--tls-server-name", "sluice.test"}
	code, out, errs := runCmd(ctx, "", append([]string{"pub"}, append(tlsArgs, "chat.tls", "one", "two")...)...)
	if code != exitOK {
		t.Fatalf("pub over TLS: %d %s", code, errs)
	}
	ps := positions(t, out, 2)
	code, out, errs = runCmd(ctx, "", append([]string{"sub"}, append(tlsArgs, "chat.tls", "--from", "earliest", "--count", "2")...)...)
	if want := fmt.Sprintf("%d\tone\n%d\ttwo\n", ps[0], ps[1]); code != exitOK || out != want {
		t.Fatalf("sub over TLS: %d %q %s; want %q", code, out, errs, want)
	}
	// The plain listener serves the same channels.
	code, out, _ = runCmd(ctx, "", "sub", "--server", r.addr, "chat.tls", "--from", "earliest", "--count", "1")
	if code != exitOK || !strings.HasSuffix(out, "\tone\n") {
		t.Fatalf("plain sub: %d %q", code, out)
	}
	// A CA that did not sign the server's certificate is refused.
	code, _, errs = runCmd(ctx, "", "pub", "--server", r.tlsAddr, "--tls-ca", otherCA, "--timeout", "2s", "chat.tls", "x")
	if code != exitFail || !strings.Contains(errs, "certificate") {
		t.Fatalf("untrusted server: %d %s", code, errs)
	}
	code, _, errs = runCmd(ctx, "", "pub", "--server", r.tlsAddr, "--tls-ca", filepath.Join(dir, "nope.pem"), "chat.tls", "x")
	if code != exitUsage || !strings.Contains(errs, "--tls-ca") {
		t.Fatalf("missing CA file: %d %s", code, errs)
	}
}

func TestTokenCommand(t *testing.T) {
	ctx := context.Background()
	code, out, _ := runCmd(ctx, "", "token")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 2 || len(lines[0]) < 40 || lines[1] != engine.HashToken([]byte(lines[0])) {
		t.Fatalf("token: %d %q", code, out)
	}
	code, out, _ = runCmd(ctx, "s3cret\n", "token", "--hash")
	if code != exitOK || out != engine.HashToken([]byte("s3cret"))+"\n" {
		t.Fatalf("token --hash: %d %q", code, out)
	}
	if code, _, _ := runCmd(ctx, "", "token", "--hash"); code != exitFail {
		t.Fatalf("token --hash with no input: %d", code)
	}
}
