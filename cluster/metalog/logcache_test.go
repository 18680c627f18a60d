package metalog

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// The log store keeps its newest entries in memory: the leader reads back
// every entry it just wrote to send it to the followers, and those reads
// do not touch the WAL's files (the WAL closed here, they still succeed),
// while older entries come from the WAL.
func TestOpenStores_NewestEntriesFromMemory(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), MaxAppendEntries: 4}.withDefaults()
	st, err := openStores(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	logs := make([]*raft.Log, n)
	for i := range logs {
		logs[i] = &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("cmd %d", i+1))}
	}
	if err := st.logs.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := st.logs.GetLog(1, &l); err != nil || string(l.Data) != "cmd 1" {
		t.Fatalf("entry 1 from the WAL: %q, %v", l.Data, err)
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	for i := n - logCacheEntries(cfg) + 1; i <= n; i++ {
		if err := st.logs.GetLog(uint64(i), &l); err != nil || string(l.Data) != fmt.Sprintf("cmd %d", i) {
			t.Fatalf("entry %d with the WAL closed: %q, %v", i, l.Data, err)
		}
	}
	if err := st.logs.GetLog(1, &l); err == nil {
		t.Fatal("entry 1 read with the WAL closed: the WAL is still open, which proves nothing")
	}
}
