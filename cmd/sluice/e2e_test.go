package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/engine"
)

const e2eTimeout = 10 * time.Second

// startEngine runs an engine on a free port for one test.
func startEngine(t *testing.T) string {
	t.Helper()
	opts := engine.DefaultOptions()
	opts.Listen = "127.0.0.1:0"
	opts.Loops = 1
	opts.Logger = slog.New(slog.DiscardHandler)
	srv, err := engine.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return srv.Addr()
}

func ctxE2E(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	t.Cleanup(cancel)
	return ctx
}

// positions parses pub's output: one position per line.
func positions(t *testing.T, out string, n int) []uint64 {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("pub printed %d lines, want %d: %q", len(lines), n, out)
	}
	var ps []uint64
	for _, l := range lines {
		p, err := strconv.ParseUint(l, 10, 64)
		if err != nil {
			t.Fatalf("pub line %q: %v", l, err)
		}
		if len(ps) > 0 && p <= ps[len(ps)-1] {
			t.Fatalf("positions not increasing: %q", out)
		}
		ps = append(ps, p)
	}
	return ps
}

func TestEndToEndPubSub(t *testing.T) {
	addr := startEngine(t)
	ctx := ctxE2E(t)

	code, out, errs := runCmd(ctx, "", "pub", "news", "--server", addr, "hello", "wor\tld")
	if code != exitOK || errs != "" {
		t.Fatalf("pub args: code %d stderr %q", code, errs)
	}
	ps := positions(t, out, 2)

	code, out, errs = runCmd(ctx, "line1\n\nline3\r\nline4", "pub", "--server", addr, "news")
	if code != exitOK || errs != "" {
		t.Fatalf("pub stdin: code %d stderr %q", code, errs)
	}
	ps = append(ps, positions(t, out, 4)...)
	if ps[2] <= ps[1] {
		t.Fatalf("positions %v", ps)
	}

	code, out, errs = runCmd(ctx, "", "sub", "news", "--server", addr, "--from", "earliest", "--count", "6")
	if code != exitOK || errs != "" {
		t.Fatalf("sub: code %d stderr %q", code, errs)
	}
	want := ""
	for i, p := range []string{"hello", "wor\tld", "line1", "", "line3", "line4"} {
		want += strconv.FormatUint(ps[i], 10) + "\t" + p + "\n"
	}
	if out != want {
		t.Fatalf("sub output\n%q\nwant\n%q", out, want)
	}

	code, out, _ = runCmd(ctx, "", "sub", "--hex", "--server", addr, "news", "--from", strconv.FormatUint(ps[4], 10), "--count", "2")
	if want := strconv.FormatUint(ps[4], 10) + "\t6c696e6533\n" + strconv.FormatUint(ps[5], 10) + "\t6c696e6534\n"; code != exitOK || out != want {
		t.Fatalf("sub --hex --from: code %d output %q, want %q", code, out, want)
	}

	code, out, _ = runCmd(ctx, "", "sub", "news", "--server", addr, "--last", "1", "--count", "1")
	if want := strconv.FormatUint(ps[5], 10) + "\tline4\n"; code != exitOK || out != want {
		t.Fatalf("sub --last: code %d output %q, want %q", code, out, want)
	}
}

// TestEndToEndLiveSubInterrupted: a live sub prints what is published after
// it started and exits 0 when interrupted.
func TestEndToEndLiveSubInterrupted(t *testing.T) {
	addr := startEngine(t)
	ctx := ctxE2E(t)
	subCtx, interrupt := context.WithCancel(ctx)
	out := newWatchWriter("\tlive2\n")
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(subCtx, stdio{in: strings.NewReader(""), out: out, err: &errb}, []string{"sub", "--server", addr, "ticker"})
	}()
	// Publish until the live subscription has certainly started: each
	// round publishes live1 then live2; the sub sees a live2 eventually.
	for {
		if code, _, errs := runCmd(ctx, "", "pub", "--server", addr, "ticker", "live1", "live2"); code != exitOK {
			t.Fatalf("pub: %d %s", code, errs)
		}
		select {
		case <-out.seen:
		case <-time.After(50 * time.Millisecond):
			continue
		}
		break
	}
	interrupt()
	if code := <-done; code != exitOK {
		t.Fatalf("interrupted sub exited %d: %s", code, errb.String())
	}
	if !regexp.MustCompile(`^(\d+\tlive[12]\n)+$`).MatchString(out.String()) {
		t.Fatalf("sub output %q", out.String())
	}
}

func TestEndToEndPubUnacknowledged(t *testing.T) {
	addr := startEngine(t)
	code, out, errs := runCmd(ctxE2E(t), "", "pub", "--server", addr, "bad channel", "m")
	if code != exitFail || out != "" || !strings.Contains(errs, "invalid channel") {
		t.Fatalf("code %d stdout %q stderr %q", code, out, errs)
	}
}

// TestServeCommand runs `sluice serve` in-process, publishes to the address
// it logs, and interrupts it: it shuts down and exits 0.
func TestServeCommand(t *testing.T) {
	ctx := ctxE2E(t)
	srvCtx, interrupt := context.WithCancel(ctx)
	logs := newWatchWriter("msg=ready")
	done := make(chan int, 1)
	go func() {
		done <- run(srvCtx, stdio{in: strings.NewReader(""), out: io.Discard, err: logs},
			[]string{"serve", "--listen", "127.0.0.1:0", "--loops", "1", "--limit-msgs", "2"})
	}()
	select {
	case <-logs.seen:
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, logs.String())
	case <-ctx.Done():
		t.Fatal("serve did not start")
	}
	m := regexp.MustCompile(`msg=ready addr=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no address in %q", logs.String())
	}
	code, out, errs := runCmd(ctx, "", "pub", "--server", m[1], "ch", "a", "b", "c")
	if code != exitOK {
		t.Fatalf("pub: %d %s", code, errs)
	}
	positions(t, out, 3)
	interrupt()
	if code := <-done; code != exitOK {
		t.Fatalf("serve exited %d: %s", code, logs.String())
	}
	if !strings.Contains(logs.String(), "msg=stopped") {
		t.Fatalf("no shutdown log: %s", logs.String())
	}
}

// watchWriter is a concurrency-safe buffer that closes seen once its
// content contains a marker.
type watchWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	seen   chan struct{}
	closed bool
}

func newWatchWriter(marker string) *watchWriter {
	return &watchWriter{marker: marker, seen: make(chan struct{})}
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if !w.closed && strings.Contains(w.buf.String(), w.marker) {
		w.closed = true
		close(w.seen)
	}
	return n, err
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestEndToEndSubResumesAcrossRestart: the server restarts on the same
// address; `sluice sub` reconnects, resumes after the last message it
// printed, reports the new epoch and the lost range, and prints what is
// published after the restart.
func TestEndToEndSubResumesAcrossRestart(t *testing.T) {
	ctx := ctxE2E(t)
	opts := engine.DefaultOptions()
	opts.Listen = "127.0.0.1:0"
	opts.Loops = 1
	opts.Logger = slog.New(slog.DiscardHandler)
	a, err := engine.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	addr := a.Addr()
	out, errw := newWatchWriter("\tm2\n"), newWatchWriter("gap ")
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, stdio{in: strings.NewReader(""), out: out, err: errw},
			[]string{"sub", "--server", addr, "ch", "--from", "earliest", "--count", "3"})
	}()
	code, pubOut, errs := runCmd(ctx, "", "pub", "--server", addr, "ch", "m1", "m2")
	if code != exitOK {
		t.Fatalf("pub: %d %s", code, errs)
	}
	ps := positions(t, pubOut, 2)
	select {
	case <-out.seen:
	case <-ctx.Done():
		t.Fatalf("sub printed %q", out.String())
	}
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	opts.Listen = addr
	b, err := engine.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	code, pubOut, errs = runCmd(ctx, "", "pub", "--server", addr, "ch", "m3")
	if code != exitOK {
		t.Fatalf("pub after restart: %d %s", code, errs)
	}
	p3 := positions(t, pubOut, 1)[0]
	if code := <-done; code != exitOK {
		t.Fatalf("sub exited %d: %s", code, errw.String())
	}
	want := fmt.Sprintf("%d\tm1\n%d\tm2\n%d\tm3\n", ps[0], ps[1], p3)
	if out.String() != want {
		t.Fatalf("sub output %q, want %q", out.String(), want)
	}
	// The restarted node's channel is a new incarnation: a new epoch,
	// numbered from 1 again, delivered from its start.
	if p3 != 1 || !regexp.MustCompile(`(?m)^epoch \d+ from 1\n`).MatchString(errw.String()) || strings.Contains(errw.String(), "gap ") {
		t.Fatalf("sub stderr %q (m3 at %d)", errw.String(), p3)
	}
}
