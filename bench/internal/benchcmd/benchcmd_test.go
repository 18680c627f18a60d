package benchcmd

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/engine"
)

func TestFlagsRegisterAndCheck(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"--runs", "4", "--server-cpus", "0", "--client-cpus", "1"}, true},
		{[]string{"--runs", "0"}, false},
		{[]string{"--server-cpus", "x"}, false},
		{[]string{"--client-cpus", "1-"}, false},
	} {
		var f Flags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.Register(fs, 3, "each setup")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err := f.Check()
		if (err == nil) != tc.ok {
			t.Errorf("%v: Check = %v, want ok %v", tc.args, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrFlags) {
			t.Errorf("%v: %v does not wrap ErrFlags", tc.args, err)
		}
		if tc.args == nil && f.Runs != 3 {
			t.Errorf("default runs %d, want 3", f.Runs)
		}
	}
}

// TestServeProfilesTheServersLife: Serve starts the server, keeps it until
// ctx ends, stops it, and leaves a non-empty profile; a failing start is
// returned and leaves nothing running.
func TestServeProfilesTheServersLife(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.pprof")
	ctx, cancel := context.WithCancel(context.Background())
	started, stopped := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, path, func() (func(), error) {
			close(started)
			return func() { close(stopped) }, nil
		})
	}()
	<-started
	select {
	case <-stopped:
		t.Fatal("stopped before ctx ended")
	case <-done:
		t.Fatal("returned before ctx ended")
	default:
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after ctx ended")
	}
	<-stopped
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("profile: %v, %v", st, err)
	}
	boom := errors.New("boom")
	if err := Serve(context.Background(), "", func() (func(), error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("start error: %v", err)
	}
	if _, err := StartCPUProfile(filepath.Join(t.TempDir(), "no", "such", "dir")); err == nil {
		t.Fatal("profile into a missing directory accepted")
	}
}

// TestMainIfChildReturnsForTests: without a child flag first, the tests
// run (MainIfChild returns).
func TestMainIfChildReturnsForTests(t *testing.T) {
	MainIfChild(func(context.Context, []string, io.Writer, io.Writer) int {
		t.Fatal("ran as a child")
		return 1
	})
}

// TestStartEngineServesUntilStopped: the server StartEngine starts accepts
// connections until stop returns, and not after.
func TestStartEngineServesUntilStopped(t *testing.T) {
	opts := engine.DefaultOptions()
	opts.Listen = "127.0.0.1:0"
	srv, stop, err := StartEngine(opts)
	if err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	_ = c.Close()
	stop()
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		_ = c.Close()
		t.Fatalf("%s still accepts after stop", addr)
	}
}

// TestRunExitCodes: Run's exit codes and messages for each outcome, and
// that it runs the child mode when there is one, else the load generator.
func TestRunExitCodes(t *testing.T) {
	boom := errors.New("boom")
	ended, cancel := context.WithCancel(context.Background())
	cancel() // a child mode returns as soon as it started
	for _, tc := range []struct {
		name      string
		parseErr  error
		child     bool
		childErr  error
		runErr    error
		code      int
		ran, kid  bool
		stderrHas string
	}{
		{name: "help", parseErr: flag.ErrHelp, code: 0},
		{name: "usage error", parseErr: ErrFlags, code: 2, stderrHas: "cmd: benchcmd: bad flag"},
		{name: "load generator", code: 0, ran: true},
		{name: "load generator fails", runErr: boom, code: 1, ran: true, stderrHas: "cmd: boom"},
		{name: "child", child: true, code: 0, kid: true},
		{name: "child fails to start", child: true, childErr: boom, code: 1, kid: true, stderrHas: "cmd: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			ran, kid := false, false
			var child func() (func(), error)
			if tc.child {
				child = func() (func(), error) {
					kid = true
					if tc.childErr != nil {
						return nil, tc.childErr
					}
					return func() {}, nil
				}
			}
			f := Flags{Runs: 1}
			code := Run(ended, "cmd", &stderr, tc.parseErr, &f, child, func() error { ran = true; return tc.runErr })
			if code != tc.code || ran != tc.ran || kid != tc.kid {
				t.Fatalf("code %d, ran %v, child %v; want %d, %v, %v", code, ran, kid, tc.code, tc.ran, tc.kid)
			}
			if !strings.Contains(stderr.String(), tc.stderrHas) || (tc.stderrHas == "") != (stderr.Len() == 0) {
				t.Fatalf("stderr %q, want %q", stderr.String(), tc.stderrHas)
			}
		})
	}
}
