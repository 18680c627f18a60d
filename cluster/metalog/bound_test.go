package metalog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/metaload"
)

// diskUse is what a data directory holds.
type diskUse struct {
	segments, snapshots, partial int   // WAL segment files; complete and partial (.tmp) snapshots
	segBytes, snapBytes, total   int64 // their sizes, and everything's
}

func (d diskUse) String() string {
	return fmt.Sprintf("%d WAL segments (%d bytes), %d snapshots (%d bytes), %d partial, %d bytes in all",
		d.segments, d.segBytes, d.snapshots, d.snapBytes, d.partial, d.total)
}

// measureDir returns what dir holds now.
func measureDir(tb testing.TB, dir string) diskUse {
	tb.Helper()
	// raft reaps old snapshots and the WAL drops segments while the log
	// runs: a walk that met a file or directory removed under it is
	// taken again, so that the measure is of one moment's files.
	for range 100 {
		d, err := walkDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			tb.Fatal(err)
		}
		return d
	}
	tb.Fatalf("%s: files removed under every one of 100 walks", dir)
	return diskUse{}
}

// walkDir measures dir in one walk; an error wrapping fs.ErrNotExist
// means something was removed during it.
func walkDir(dir string) (diskUse, error) {
	var d diskUse
	err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		parts := strings.Split(rel, string(filepath.Separator))
		switch {
		case fi.IsDir() && len(parts) == 2 && parts[0] == snapshotsDir && strings.HasSuffix(parts[1], ".tmp"):
			d.partial++
		case fi.IsDir() && len(parts) == 2 && parts[0] == snapshotsDir:
			d.snapshots++
		case fi.IsDir():
		case parts[0] == "wal" && strings.HasSuffix(path, ".wal"):
			d.segments++
			d.segBytes += fi.Size()
		case parts[0] == snapshotsDir:
			d.snapBytes += fi.Size()
		}
		if !fi.IsDir() {
			d.total += fi.Size()
		}
		return nil
	})
	return d, err
}

// TestOpenStores_RemovesPartialSnapshots: a snapshot a crash left half
// written (raft's ".tmp" directory, which its store skips but never
// removes) is removed when the log opens its directory again; complete
// snapshots stay.
func TestOpenStores_RemovesPartialSnapshots(t *testing.T) {
	dir := t.TempDir()
	c := newTestCluster(t, func(cfg *Config) { cfg.SnapshotThreshold, cfg.SnapshotInterval = 4, 10*time.Millisecond })
	c.newApp = func() FSM { return newMetaFSM() }
	n := c.start("a", true, func(cfg *Config) { cfg.DataDir = dir })
	l := c.leader()
	pr := newProposer(metaload.New(metaload.Config{Channels: 50}), func() Log { return l.log })
	pr.run(t, 20, 0, 4)
	waitFor(t, testTimeout, "a snapshot", func() bool { return n.log.Status().SnapshotIndex > 0 })
	c.kill(n)
	partial := filepath.Join(dir, snapshotsDir, "3-999-1765000000000.tmp")
	if err := os.MkdirAll(partial, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, "state.bin"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	c.start("a", true, func(cfg *Config) { cfg.DataDir = dir })
	if d := measureDir(t, dir); d.partial != 0 || d.snapshots == 0 {
		t.Fatalf("after the restart: %v", d)
	}
	if _, err := os.Stat(partial); !os.IsNotExist(err) {
		t.Fatalf("the partial snapshot is still there: %v", err)
	}
}

// TestRaft_LogAndDataDirStayBounded: a node takes 12 rounds of package
// meta's commands (channels rolling over), 20 times what the log keeps in
// all. After each round, once the snapshotter has caught up (fewer than
// SnapshotThreshold entries after the latest snapshot), the log holds at
// most SnapshotThreshold + TrailingLogs entries and its first index has
// moved up; the WAL's segment files are only those that hold them (plus
// the one being filled); SnapshotRetain snapshots are kept, none partial.
// Restarted from its directory, the node restores its latest snapshot,
// replays the entries after it, and its state equals the one it had.
func TestRaft_LogAndDataDirStayBounded(t *testing.T) {
	const threshold, trailing, segSize, retain = 256, 128, 64 << 10, 2
	const rounds, perRound = 12, 640
	c := newTestCluster(t, func(cfg *Config) {
		cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval = threshold, trailing, 10*time.Millisecond
		cfg.SegmentSize, cfg.SnapshotRetain = segSize, retain
	})
	c.newApp = func() FSM { return newMetaFSM() }
	a := c.start("a", true, nil)
	l := c.leader()
	pr := newProposer(metaload.New(metaload.Config{Channels: 1000, Keep: 4, ExpireBatch: 32}), func() Log { return l.log })
	var prevFirst, last uint64
	var d diskUse
	for round := range rounds {
		last = pr.run(t, perRound, 0, 16)
		var st Status
		waitFor(t, testTimeout, "the snapshotter to catch up", func() bool {
			st = a.log.Status()
			return st.LastIndex-st.SnapshotIndex < threshold && st.LastIndex-st.FirstIndex+1 <= threshold+trailing
		})
		if st.FirstIndex <= prevFirst && round > 1 {
			t.Fatalf("round %d: the first index %d did not move up from %d", round, st.FirstIndex, prevFirst)
		}
		prevFirst = st.FirstIndex
		// The kept entries' bytes, each with 64 bytes of the WAL's framing
		// and raft's fields, fill this many segments, and one more may be
		// part-filled at each end (the head the truncation kept, the
		// tail being written).
		cmdBytes, own := pr.bytesIn(st.FirstIndex, st.LastIndex)
		kept := int64(cmdBytes) + 64*int64(st.LastIndex-st.FirstIndex+1)
		maxSegs := int((kept+segSize-1)/segSize) + 2
		var why string
		deadline := time.Now().Add(testTimeout)
		for {
			d = measureDir(t, a.dir)
			why = ""
			switch {
			case d.segments > maxSegs:
				why = fmt.Sprintf("more than %d WAL segments for %d entries (%d of raft's own), %d bytes", maxSegs, st.LastIndex-st.FirstIndex+1, own, kept)
			case d.snapshots > retain || d.partial > 0:
				why = fmt.Sprintf("more than %d snapshots, or a partial one", retain)
			}
			if why == "" || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if why != "" {
			t.Fatalf("round %d (log %d..%d, snapshot at %d): %s: %v", round, st.FirstIndex, st.LastIndex, st.SnapshotIndex, why, d)
		}
	}
	// Unbounded, the WAL would hold every entry: at least 4 times the
	// segments kept, or the test shows nothing.
	if cmdBytes, _ := pr.bytesIn(1, last); (int64(cmdBytes)+64*int64(last))/segSize < 4*int64(max(d.segments, 1)) {
		t.Fatalf("the test proposed %d bytes in %d entries: not enough to show the WAL bounded at %d segments", cmdBytes, last, d.segments)
	}
	if n := pr.conflicts.Load(); n > 0 {
		t.Logf("%d commands conflicted (overtaken in flight); the states compared below hold the log's outcome either way", n)
	}
	t.Logf("log %d..%d at the end: %v", prevFirst, last, d)
	want := dump(a.app.(*metaFSM).st)
	applied := a.app.(*metaFSM).st.Applied()
	c.kill(a)
	c.start("a", true, nil)
	c.leader()
	st := a.app.(*metaFSM).st
	waitFor(t, testTimeout, "the restarted node to apply the log", func() bool { return st.Applied() >= applied })
	_, _, restores := a.app.(*metaFSM).timings()
	if len(restores) != 1 {
		t.Fatalf("the restart restored %d snapshots, want 1", len(restores))
	}
	if got := dump(st); got != want {
		t.Fatalf("the restarted node's state differs:\n%.2000s\nwant\n%.2000s", got, want)
	}
}
