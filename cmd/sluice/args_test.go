package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client"
	"github.com/sluice-rtm/sluice/engine"
)

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		pos     []string
		server  string
		count   int
		wantErr bool
	}{
		{args: nil, pos: nil, server: "d"},
		{args: []string{"ch"}, pos: []string{"ch"}, server: "d"},
		{args: []string{"--server", "s:1", "ch"}, pos: []string{"ch"}, server: "s:1"},
		{args: []string{"ch", "--server", "s:1"}, pos: []string{"ch"}, server: "s:1"},
		{args: []string{"ch", "-count=3", "m1", "--server=s:2", "m2"}, pos: []string{"ch", "m1", "m2"}, server: "s:2", count: 3},
		{args: []string{"ch", "--", "-m1", "--server", "x"}, pos: []string{"ch", "-m1", "--server", "x"}, server: "d"},
		{args: []string{"--", "ch"}, pos: []string{"ch"}, server: "d"},
		{args: []string{"ch", "-"}, pos: []string{"ch", "-"}, server: "d"},
		{args: []string{"ch", "--nope"}, wantErr: true},
		{args: []string{"ch", "--count", "x"}, wantErr: true},
		{args: []string{"ch", "--server"}, wantErr: true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		server := fs.String("server", "d", "")
		count := fs.Int("count", 0, "")
		pos, err := parseInterspersed(fs, tc.args)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%q: err %v", tc.args, err)
		}
		if err == nil && (!slices.Equal(pos, tc.pos) || *server != tc.server || *count != tc.count) {
			t.Fatalf("%q: pos %q server %q count %d", tc.args, pos, *server, *count)
		}
	}
}

func TestParseServe(t *testing.T) {
	def := engine.DefaultOptions()
	for _, tc := range []struct {
		args  []string
		check func(serveConfig) bool
		err   string
	}{
		{nil, func(c serveConfig) bool {
			return c.opts.Listen == def.Listen && c.opts.LimitMsgs == def.LimitMsgs && c.level == slog.LevelInfo
		}, ""},
		{[]string{"--listen", "127.0.0.1:0", "--loops", "3", "--max-conns", "7", "--max-subs", "9"}, func(c serveConfig) bool {
			return c.opts.Listen == "127.0.0.1:0" && c.opts.Loops == 3 && c.opts.MaxConns == 7 && c.opts.MaxSubsPerConn == 9
		}, ""},
		{[]string{"--limit-msgs", "10", "--limit-size", "2MiB", "--limit-life", "2s", "--ttl", "1m"}, func(c serveConfig) bool {
			return c.opts.LimitMsgs == 10 && c.opts.LimitSize == 2<<20 && c.opts.LimitLife == 2*time.Second && c.opts.TTL == time.Minute
		}, ""},
		{[]string{"--max-retained", "256MiB"}, func(c serveConfig) bool { return c.opts.MaxRetained == 256<<20 }, ""},
		{nil, func(c serveConfig) bool { return c.opts.MaxRetained == 1<<30 }, ""},
		{[]string{"--max-payload", "1000", "--outbound-limit", "8MB", "--slow-policy", "disconnect"}, func(c serveConfig) bool {
			return c.opts.MaxPayload == 1000 && c.opts.OutboundLimit == 8e6 && c.opts.SlowPolicy == engine.SlowDisconnect
		}, ""},
		{[]string{"--log-level", "debug", "--ping-interval", "0s", "--name", "n1", "--shutdown-timeout", "3s"}, func(c serveConfig) bool {
			return c.level == slog.LevelDebug && c.opts.PingInterval == 0 && c.opts.ServerName == "n1" && c.shutdownTimeout == 3*time.Second
		}, ""},
		{[]string{"--slow-policy", "drop"}, nil, "slow policy"},
		{[]string{"--limit-size", "lots"}, nil, "invalid size"},
		{[]string{"--limit-size", "1.5B"}, nil, "whole number"},
		{[]string{"--log-level", "loud"}, nil, "log-level"},
		{[]string{"--ttl", "soon"}, nil, "ttl"},
		{[]string{"--shutdown-timeout", "0s"}, nil, "shutdown-timeout"},
		{nil, func(c serveConfig) bool { return c.drainTimeout == 20*time.Second }, ""},
		{[]string{"--drain-timeout", "45s"}, func(c serveConfig) bool { return c.drainTimeout == 45*time.Second }, ""},
		{[]string{"--drain-timeout", "0s"}, nil, "drain-timeout"},
	} {
		fs := newFlagSet("serve", "", "")
		cfg, _, err := parseServe(fs, tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%q: err %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || !tc.check(cfg) {
			t.Fatalf("%q: %+v %v", tc.args, cfg, err)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"0": 0, "123": 123, "1K": 1024, "2KiB": 2048, "1MB": 1e6, "3MiB": 3 << 20, "1GiB": 1 << 30, "1.5K": 1536, "7B": 7} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Fatalf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "K", "1TB", "1e30", "NaN", "0.5"} {
		if _, err := parseSize(in); err == nil {
			t.Fatalf("parseSize(%q) accepted", in)
		}
	}
}

func TestParsePub(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		ch     string
		msgs   []string
		server string
		err    string
	}{
		{args: []string{"ch"}, ch: "ch", msgs: nil, server: defaultServer},
		{args: []string{"ch", "a", "b", "--server", "h:1"}, ch: "ch", msgs: []string{"a", "b"}, server: "h:1"},
		{args: []string{"--server=h:2", "ch", "--", "-x"}, ch: "ch", msgs: []string{"-x"}, server: "h:2"},
		{args: nil, err: "missing CHANNEL"},
		{args: []string{"ch", "--window", "0"}, err: "--window"},
		{args: []string{"ch", "--timeout", "-1s"}, err: "--timeout"},
		{args: []string{"ch", "--header", "novalue"}, err: "not KEY=VALUE"},
		{args: []string{"ch", "--header", "a b=1"}, err: "token character"},
		{args: []string{"ch", "--header", "k=a\nb"}, err: "control character"},
		{args: []string{"ch", "--msg-id", "x"}, err: "exactly one MESSAGE"},
		{args: []string{"ch", "--msg-id", "x", "a", "b"}, err: "exactly one MESSAGE"},
		{args: []string{"ch", "--msg-id", strings.Repeat("i", 256), "a"}, err: "--msg-id"},
	} {
		cfg, err := parsePub(newFlagSet("pub", "", ""), tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%q: err %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || cfg.channel != tc.ch || !slices.Equal(cfg.messages, tc.msgs) || cfg.server != tc.server {
			t.Fatalf("%q: %+v %v", tc.args, cfg, err)
		}
	}
}

func TestParsePubHeaders(t *testing.T) {
	cfg, err := parsePub(newFlagSet("pub", "", ""), []string{"ch", "--header", "traceparent=00-ab=cd", "--msg-id", "o-1",
		"--header", "k=", "--idempotent", "m"})
	want := []client.Header{{Key: "traceparent", Value: "00-ab=cd"}, {Key: "k", Value: ""}}
	if err != nil || !slices.Equal(cfg.headers, want) || cfg.msgID != "o-1" || !cfg.idem || !slices.Equal(cfg.messages, []string{"m"}) {
		t.Fatalf("%+v %v", cfg, err)
	}
}

func TestParseSub(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		count int
		hex   bool
		err   string
	}{
		{args: []string{"ch"}},
		{args: []string{"ch", "--from", "earliest", "--count", "3", "--hex"}, count: 3, hex: true},
		{args: []string{"ch", "--headers"}},
		{args: []string{"--count=2", "ch", "--from=17"}, count: 2},
		{args: []string{"ch", "--last", "5"}},
		{args: []string{"--since", "2s", "ch"}},
		{args: nil, err: "missing CHANNEL"},
		{args: []string{"a", "b"}, err: "unexpected argument"},
		{args: []string{"ch", "--from", "0"}, err: "--from"},
		{args: []string{"ch", "--from", "soon"}, err: "--from"},
		{args: []string{"ch", "--from", "earliest", "--last", "3"}, err: "only one"},
		{args: []string{"ch", "--since", "0s"}, err: "--since"},
		{args: []string{"ch", "--count", "-1"}, err: "--count"},
	} {
		cfg, err := parseSub(newFlagSet("sub", "", ""), tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%q: err %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || cfg.channel != "ch" || cfg.count != tc.count || cfg.hex != tc.hex || cfg.start == nil {
			t.Fatalf("%q: %+v %v", tc.args, cfg, err)
		}
	}
}

// runCmd runs the CLI in-process and returns its exit status and output.
func runCmd(ctx context.Context, stdin string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(ctx, stdio{in: strings.NewReader(stdin), out: &out, err: &errb}, args)
	return code, out.String(), errb.String()
}

// cmdCase is a command line and what running it must give.
type cmdCase struct {
	args []string
	code int
	out  string // substring of stdout
	err  string // substring of stderr
}

// checkCommands runs each case's command line in this process.
func checkCommands(t *testing.T, ctx context.Context, cases []cmdCase) {
	t.Helper()
	for _, tc := range cases {
		code, out, errs := runCmd(ctx, "", tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errs, tc.err) {
			t.Fatalf("%q: code %d (want %d)\nstdout: %s\nstderr: %s", tc.args, code, tc.code, out, errs)
		}
	}
}

func TestHelpAndUsage(t *testing.T) {
	checkCommands(t, context.Background(), []cmdCase{
		{[]string{"help"}, exitOK, "Commands:", ""},
		{[]string{"--help"}, exitOK, "serve", ""},
		{nil, exitUsage, "", "Usage: sluice"},
		{[]string{"frobnicate"}, exitUsage, "", `unknown command "frobnicate"`},
		{[]string{"help", "pub"}, exitOK, "CHANNEL [MESSAGE ...]", ""},
		{[]string{"help", "nope"}, exitUsage, "", "unknown command"},
		{[]string{"serve", "--help"}, exitOK, "--limit-msgs", ""},
		{[]string{"serve", "-h"}, exitOK, "SIGTERM", ""},
		{[]string{"pub", "--help"}, exitOK, "acknowledged", ""},
		{[]string{"sub", "--help"}, exitOK, "gap FROM-TO REASON", ""},
		{[]string{"version", "--help"}, exitOK, "version", ""},
		{[]string{"version"}, exitOK, "sluice " + version, ""},
		{[]string{"version", "x"}, exitUsage, "", "unexpected argument"},
		{[]string{"pub"}, exitUsage, "", "missing CHANNEL"},
		{[]string{"sub", "ch", "--bogus"}, exitUsage, "", "flag provided but not defined"},
		{[]string{"serve", "extra"}, exitUsage, "", "unexpected argument"},
		{[]string{"serve", "--limit-msgs", "-5"}, exitUsage, "", "limit-msgs: -5"},
		{[]string{"serve", "--config", "/nonexistent.toml"}, exitUsage, "", "nonexistent.toml"},
		{[]string{"token", "--help"}, exitOK, "sha256", ""},
	})
}

func TestPubCannotConnect(t *testing.T) {
	code, out, errs := runCmd(context.Background(), "", "pub", "--server", "127.0.0.1:1", "--timeout", "2s", "ch", "m")
	if code != exitFail || out != "" || !strings.Contains(errs, "dial") {
		t.Fatalf("code %d stdout %q stderr %q", code, out, errs)
	}
}

func TestWriteHeaders(t *testing.T) {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	writeHeaders(w, client.Event{MsgID: []byte("o-17"), Headers: []client.Header{{Key: "a", Value: "x\ty"}, {Key: "a", Value: ""}}})
	writeHeaders(w, client.Event{MsgID: []byte{0, 1, 0xff}})
	writeHeaders(w, client.Event{MsgID: []byte("0x12")})
	writeHeaders(w, client.Event{}) // nothing
	_ = w.Flush()
	want := "\tid\to-17\n\th\ta\tx\ty\n\th\ta\t\n\tid\t0x0001ff\n\tid\t0x30783132\n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

// TestMemoryLimit: serve gives the runtime 1.25 x --max-retained plus the
// fixed overhead as its soft memory limit, unless $GOMEMLIMIT sets one or
// the budget is off.
func TestMemoryLimit(t *testing.T) {
	if l, ok := memoryLimit(64<<20, ""); !ok || l != 80<<20+memFixedOverhead {
		t.Fatalf("64 MiB budget: %d, %v", l, ok)
	}
	if _, ok := memoryLimit(64<<20, "1GiB"); ok {
		t.Fatal("a limit although $GOMEMLIMIT is set")
	}
	if _, ok := memoryLimit(0, ""); ok {
		t.Fatal("a limit without a budget")
	}
}
