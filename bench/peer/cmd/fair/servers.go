package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/bench/peer"
)

// The two servers are the shipped binaries, built by this command from
// the modules it was built from: `sluice` from the repository (this
// module replaces github.com/sluice-rtm/sluice with ../..) and
// `nats-server` from the Go module github.com/nats-io/nats-server/v2 this
// module requires (v2.15.2). Each runs as a child process at its
// defaults: `sluice serve --listen ADDR` and `nats-server -a HOST -p PORT`
// (no JetStream).

// buildBinaries builds sluice (in the repository's own module, the
// directory this module replaces github.com/sluice-rtm/sluice with) and
// nats-server (in this module) into dir with the go command; it runs in
// the bench/peer module's directory.
func buildBinaries(ctx context.Context, dir string, stderr io.Writer) (sluiceBin, natsBin string, err error) {
	sluiceBin, natsBin = filepath.Join(dir, "sluice"), filepath.Join(dir, "nats-server")
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/sluice-rtm/sluice").Output()
	if err != nil {
		return "", "", fmt.Errorf("find the repository (run this command from bench/peer): %w", err)
	}
	repo := strings.TrimSpace(string(out))
	for _, b := range []struct{ out, pkg, dir string }{
		{sluiceBin, "./cmd/sluice", repo}, {natsBin, "github.com/nats-io/nats-server/v2", ""},
	} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.out, b.pkg)
		cmd.Dir, cmd.Stdout, cmd.Stderr = b.dir, stderr, stderr
		if err := cmd.Run(); err != nil {
			return "", "", fmt.Errorf("go build %s: %w", b.pkg, err)
		}
	}
	return sluiceBin, natsBin, nil
}

// server is one system under test, a child process.
type server struct {
	name string // "sluice" or "nats"
	bin  string
	log  *os.File // the child's output
	proc *bench.ServerProc
	addr string // host:port
	stat bench.ProcStat
}

// argv is the server's command line for addr: its defaults, only the
// address given.
func (s *server) argv(addr string) []string {
	if s.name == "nats" {
		host, port, _ := net.SplitHostPort(addr)
		return []string{s.bin, "-a", host, "-p", port}
	}
	return []string{s.bin, "serve", "--listen", addr}
}

// start starts the server on a free port.
func (s *server) start(ctx context.Context) error {
	addr, err := bench.FreePort()
	if err != nil {
		return err
	}
	p, err := bench.StartServerProc(ctx, s.argv(addr), addr, "", s.log)
	if err != nil {
		return err
	}
	s.proc, s.addr, s.stat = p, addr, p.Stat()
	return nil
}

// restart replaces the server with a fresh process (no history, no
// memory grown by earlier runs).
func (s *server) restart(ctx context.Context) error {
	s.stop()
	return s.start(ctx)
}

// stop stops the server; idempotent.
func (s *server) stop() {
	if s.proc != nil {
		s.proc.Stop()
		s.proc = nil
	}
}

// alive reports an error if the server process has exited.
func (s *server) alive() error {
	if s.proc == nil {
		return fmt.Errorf("%s is not running", s.name)
	}
	select {
	case <-s.proc.Done():
		return fmt.Errorf("%s exited (see %s)", s.name, s.log.Name())
	default:
		return nil
	}
}

// driver returns the load generator's driver for the server: Sluice's SDK
// at its defaults (no reconnection, so that a disconnect shows) with
// fire-and-forget publishes (PublishNoAck, like NATS core's Publish) and
// the row's receive path; nats.go at its defaults (no reconnection) with
// async subscriptions. loopback > 1 spreads connections over that many
// source addresses.
func (s *server) driver(r row, loopback int) bench.Driver {
	var dial func(ctx context.Context, addr string) (net.Conn, error)
	if loopback > 1 {
		dial = bench.LoopbackDialer(loopback)
	}
	if s.name == "nats" {
		return &peer.NATSDriver{URL: "nats://" + s.addr, Dial: dial}
	}
	return &bench.SluiceDriver{Addr: s.addr, NoAck: true, Recv: r.recv, SDKDefaults: true, Dial: dial}
}

// version returns the binary's version line, for the report.
func version(bin string, args ...string) string {
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return filepath.Base(bin)
	}
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}
