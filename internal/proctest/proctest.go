// Package proctest runs `sluice serve` as separate processes for the tests
// that need the node protocol between real processes: cmd/sluice's
// multi-process tests and test/fault's network-namespace suite. It builds
// the command, starts a process with its output appended to a log file,
// waits until the process logs that it is ready, signals or kills it, asks
// a node for its cluster status, and names channels that a given node
// manages. Only tests import it.
package proctest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/engine"
)

// ReadyTimeout bounds how long Start waits for a process to be ready.
const ReadyTimeout = 20 * time.Second

// readyMark is what `sluice serve` logs once its listeners serve.
var readyMark = []byte("msg=ready")

// Build builds cmd/sluice into dir (with the race detector when race is
// set) within timeout and returns the executable's path.
func Build(dir string, race bool, timeout time.Duration) (string, error) {
	bin := filepath.Join(dir, "sluice")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command in PATH to build the binary: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, goCmd, append(args, "github.com/sluice-rtm/sluice/cmd/sluice")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// Proc is one server process under a name, started again after each exit
// if the test wants; its output is appended to the log file Log across
// restarts. One goroutine at a time may call its methods (the test's);
// Exited may be waited on from any.
type Proc struct {
	Name string
	Log  string // path of the log file
	Dir  string // working directory ("": the directory of Log)

	cmd    *exec.Cmd
	exited chan struct{} // closed once the process started last has exited and its output is in Log
}

// Start runs argv (argv[0] is the program) with env added to the test's
// environment, its standard output and error appended to p.Log, and waits
// until the process has logged that it is ready. It fails the test when
// the process exits first or is not ready within ReadyTimeout; the caller
// stops the process (Stop in a cleanup). Start must not be called while
// the process started before still runs. The process runs in p.Dir, or
// else in the directory of its log (the test's), so whatever it writes at
// a relative path (a default data directory) never lands in the source
// tree.
func (p *Proc) Start(t testing.TB, env []string, argv ...string) {
	t.Helper()
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	w := &logWriter{f: f, ready: make(chan struct{})}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = p.Dir
	if cmd.Dir == "" {
		cmd.Dir = filepath.Dir(p.Log)
	}
	// One writer for both: exec copies them from one pipe, on one
	// goroutine, which Wait waits for.
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
	// The goroutine ends when the process does; Stop (the caller's
	// cleanup) makes sure it does.
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(exited)
	}()
	timer := time.NewTimer(ReadyTimeout)
	defer timer.Stop()
	select {
	case <-w.ready:
	case <-exited:
		t.Fatalf("node %s exited before it was ready:\n%s", p.Name, p.Tail(20))
	case <-timer.C:
		t.Fatalf("node %s not ready after %v:\n%s", p.Name, ReadyTimeout, p.Tail(20))
	}
}

// Started reports whether Start ran at least once.
func (p *Proc) Started() bool { return p.cmd != nil }

// Running reports whether the process started last still runs.
func (p *Proc) Running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Exited is closed once the process started last has exited (nil before
// Start).
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// ExitCode is the exit code of the process started last, once Exited is
// closed (-1 for one ended by a signal).
func (p *Proc) ExitCode() int { return p.cmd.ProcessState.ExitCode() }

// Signal sends sig to the process.
func (p *Proc) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to node %s: %v", sig, p.Name, err)
	}
}

// Kill stops the process with SIGKILL and waits for it to exit, failing
// the test after 10 s.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("node %s did not exit after SIGKILL", p.Name)
	}
}

// SendKill sends SIGKILL and returns at once (to kill several processes
// at the same moment; Kill or Exited then waits).
func (p *Proc) SendKill() { _ = p.cmd.Process.Kill() }

// Stop kills the process if it runs and waits for it (cleanups: a process
// that SIGKILL does not end is the kernel's problem, not the test's).
func (p *Proc) Stop() {
	if p.Running() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Tail returns the last lines of the log.
func (p *Proc) Tail(lines int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return err.Error()
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// logWriter appends a process's output to its log file and closes ready at
// the first complete line that holds readyMark. Only exec's copying
// goroutine calls Write.
type logWriter struct {
	f     *os.File
	line  []byte // the unfinished last line, at most maxLine bytes of it
	ready chan struct{}
	seen  bool
}

// maxLine bounds the unfinished line kept for the ready check.
const maxLine = 64 << 10

func (w *logWriter) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	if w.seen {
		return n, err
	}
	w.line = append(w.line, b...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		if bytes.Contains(w.line[:i], readyMark) {
			w.seen = true
			close(w.ready)
			w.line = nil
			return n, err
		}
		w.line = w.line[i+1:]
	}
	if len(w.line) > maxLine {
		w.line = w.line[len(w.line)-maxLine:]
	}
	w.line = append([]byte(nil), w.line...) // let the consumed prefix go
	return n, err
}

// Status runs `bin cluster status --json` against the node at addr with
// the cluster secret, allowing it timeout.
func Status(bin, addr, secret string, timeout time.Duration) (engine.Status, error) {
	raw, err := StatusJSON(bin, addr, secret, timeout)
	if err != nil {
		return engine.Status{}, err
	}
	var st engine.Status
	err = json.Unmarshal(raw, &st)
	return st, err
}

// StatusJSON is Status's answer as the command prints it (fields this
// package's engine.Status may not know included, such as those of a newer
// binary).
func StatusJSON(bin, addr, secret string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "cluster", "status", "--server", addr, "--secret", secret, "--json", "--timeout", "2s")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, errb.String())
	}
	return out.Bytes(), nil
}

// Alive counts the members of st in state alive.
func Alive(st engine.Status) int {
	n := 0
	for _, m := range st.Members {
		if m.State == "alive" {
			n++
		}
	}
	return n
}

// WaitUntil asks cond every interval until it holds, failing the test
// with what and cond's last words after d. It is for state in other
// processes, which a test has nothing to wait on for.
func WaitUntil(t testing.TB, what string, d, interval time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in %v; last %s", what, d, last)
		}
		time.Sleep(interval) // polling other processes
	}
}
