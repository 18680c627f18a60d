package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client"
)

// TestPresenceCommand: `sluice presence` prints the occupancy and the
// members (tab-separated), --counts the occupancy alone; --watch --enter
// makes the watcher a member and prints the joins and leaves of others
// and the occupancy changes, and exits after --count events.
func TestPresenceCommand(t *testing.T) {
	addr := startEngine(t)
	ctx := ctxE2E(t)
	member, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	if _, err := member.Subscribe(ctx, "room", client.WithPresence()); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCmd(ctx, "", "presence", "room", "--server", addr)
	if code != exitOK || errs != "" || !regexp.MustCompile(`^occupancy\t1\t0\t1\nmember\t\tsluice\t\d+\t\n$`).MatchString(out) {
		t.Fatalf("presence: code %d\nstdout %q\nstderr %q", code, out, errs)
	}
	code, out, _ = runCmd(ctx, "", "presence", "--counts", "--server", addr, "room")
	if code != exitOK || out != "occupancy\t1\t0\t1\n" {
		t.Fatalf("presence --counts: code %d stdout %q", code, out)
	}

	w := newWatchWriter("member\t")
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, stdio{in: strings.NewReader(""), out: w, err: &errb},
			[]string{"presence", "room", "--server", addr, "--watch", "--enter", "--count", "3"})
	}()
	<-w.seen // the query's answer is printed: the watcher is subscribed
	joiner, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := joiner.Subscribe(ctx, "room", client.WithPresence()); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(w.String(), "\noccupancy\t3\t0\t3\n") { // the join and the next occupancy came
		select {
		case <-ctx.Done():
			t.Fatalf("no join: %q", w.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	_ = joiner.Close()
	if code := <-done; code != exitOK {
		t.Fatalf("presence --watch exited %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n")
	if len(lines) != 6 || lines[0] != "occupancy\t2\t0\t2" ||
		!strings.HasPrefix(lines[3], "join\t\tsluice\t") || !strings.HasPrefix(lines[4], "occupancy\t3\t0\t3") ||
		!strings.HasPrefix(lines[5], "leave\t\tsluice\t") || strings.Split(lines[3], "\t")[3] != strings.Split(lines[5], "\t")[3] {
		t.Fatalf("presence --watch output:\n%s", w.String())
	}
}

// TestParsePresence: the command line's errors.
func TestParsePresence(t *testing.T) {
	checkCommands(t, context.Background(), []cmdCase{
		{[]string{"presence"}, exitUsage, "", "missing CHANNEL"},
		{[]string{"presence", "a", "b"}, exitUsage, "", "unexpected argument"},
		{[]string{"presence", "a", "--enter"}, exitUsage, "", "need --watch"},
		{[]string{"presence", "a", "--watch", "--count", "-1"}, exitUsage, "", "--count"},
		{[]string{"presence", "--help"}, exitOK, "occupancy SUBSCRIBERS PUBLISHERS MEMBERS", ""},
		{[]string{"presence", "--server", "127.0.0.1:1", "--timeout", "1s", "a"}, exitFail, "", "sluice presence:"},
	})
}
