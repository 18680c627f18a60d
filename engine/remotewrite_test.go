package engine

import (
	"bytes"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// split cuts a batch after about maxRemoteBatch bytes; recycling the head
// (the arrays of a completed batch are reused) must not touch the tail,
// which shares them.
func TestSplitThenRecycleKeepsTheTail(t *testing.T) {
	lc := &loopChan{l: &loop{}}
	b := &rbatch{}
	rec := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 400<<10) }
	for i := 0; i < 5; i++ {
		b.conns = append(b.conns, nil)
		b.ids = append(b.ids, uint32(i+1))
		b.acked = append(b.acked, true)
		b.run = wire.AppendRecord(b.run, rec(i))
	}
	lc.pend = &rbatch{ids: []uint32{99}, conns: []*conn{nil}, acked: []bool{false}, run: wire.AppendRecord(nil, []byte("z"))}
	tail := lc.split(b)
	if b.len() != 2 || len(b.run) > maxRemoteBatch {
		t.Fatalf("head has %d records, %d bytes; want 2 within %d", b.len(), len(b.run), maxRemoteBatch)
	}
	if got := tail.ids; len(got) != 4 || got[0] != 3 || got[3] != 99 {
		t.Fatalf("tail ids %v, want [3 4 5 99]", got)
	}
	lc.recycle(b)
	reused := lc.spare
	for i := 0; i < 5; i++ { // fill the recycled arrays past their old length
		reused.ids = append(reused.ids, 1000)
		reused.run = wire.AppendRecord(reused.run, []byte("overwrite"))
	}
	if tail.ids[0] != 3 || tail.ids[1] != 4 || tail.ids[2] != 5 {
		t.Fatalf("recycling the head changed the tail's ids: %v", tail.ids)
	}
	p, _, _ := wire.NextRecord(tail.run)
	if !bytes.Equal(p, rec(2)) {
		t.Fatal("recycling the head changed the tail's records")
	}
}
