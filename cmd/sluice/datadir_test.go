package main

import (
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/proctest"
)

// stopGracefully sends SIGTERM to p and waits for it to exit.
func stopGracefully(t *testing.T, p *proctest.Proc) {
	t.Helper()
	p.Signal(t, syscall.SIGTERM)
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit after SIGTERM:\n%s", p.Name, p.Tail(20))
	}
}

// emptyDir fails the test unless dir holds nothing.
func emptyDir(t *testing.T, what, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("%s: %s was created", what, e.Name())
	}
}

// TestServeSingleNodeNeedsNoDataDir: `sluice serve` with no flag but its
// client address (a free port, so that the test runs beside others) is a
// single node that needs no set-up and writes no file: it serves
// publishes, stops, and leaves its working directory and HOME empty.
func TestServeSingleNodeNeedsNoDataDir(t *testing.T) {
	work, home := t.TempDir(), t.TempDir()
	p := &proctest.Proc{Name: "single", Log: filepath.Join(t.TempDir(), "single.log"), Dir: work}
	t.Cleanup(p.Stop)
	addr := freePort(t)
	p.Start(t, []string{"HOME=" + home, "XDG_STATE_HOME=", "XDG_DATA_HOME=", "XDG_CONFIG_HOME="}, buildSluice(t), "serve", "--listen", addr)
	code, out, errs := runCmd(ctxE2E(t), "", "pub", "--server", addr, "ch", "a", "b", "c")
	if code != exitOK {
		t.Fatalf("pub: %d %s", code, errs)
	}
	positions(t, out, 3)
	stopGracefully(t, p)
	emptyDir(t, "the working directory", work)
	emptyDir(t, "HOME", home)
}

// TestClusterNodeDefaultDataDir: a cluster node given no --data-dir keeps
// its metadata log in sluice-data/NODE-NAME under its working directory,
// and restarted from there it keeps its server id (its identity in the
// log's configuration).
func TestClusterNodeDefaultDataDir(t *testing.T) {
	work := t.TempDir()
	p := &proctest.Proc{Name: "n1", Log: filepath.Join(t.TempDir(), "n1.log"), Dir: work}
	t.Cleanup(p.Stop)
	args := []string{buildSluice(t), "serve", "--node-name", "n1", "--listen", freePort(t), "--cluster-listen", freePort(t),
		"--raft-listen", freePort(t), "--raft-timeout", "300ms", "--shutdown-timeout", "2s"}
	env := []string{clusterSecretEnv + "=" + mpSecret}
	p.Start(t, env, args...)
	dir := filepath.Join(work, "sluice-data", "n1")
	if fi, err := os.Stat(filepath.Join(dir, "wal")); err != nil || !fi.IsDir() {
		t.Fatalf("no metadata log in %s: %v", dir, err)
	}
	stopGracefully(t, p)
	p.Start(t, env, args...)
	stopGracefully(t, p)
	log, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	ids := regexp.MustCompile(`msg="sluice cluster node" .*server_id=(\S+)`).FindAllSubmatch(log, -1)
	if len(ids) != 2 || string(ids[0][1]) != string(ids[1][1]) {
		t.Fatalf("server ids of the two runs: %q\n%s", ids, p.Tail(40))
	}
	t.Logf("server id %s kept in %s", ids[0][1], dir)
}
