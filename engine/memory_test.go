package engine

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	"github.com/sluice-rtm/sluice/role"
)

// TestGatewayMapShrinks: once most channels' views are released, the
// gateway's channel map is a fresh one holding what is left (a Go map
// keeps the memory of its peak otherwise).
func TestGatewayMapShrinks(t *testing.T) {
	g := newGateway(2)
	var gcs []*gwChan
	for i := range 2048 {
		gcs = append(gcs, g.acquire(fmt.Sprint("c", i)))
	}
	orig := reflect.ValueOf(g.m).UnsafePointer()
	for _, gc := range gcs[:2000] {
		g.release(gc)
	}
	if reflect.ValueOf(g.m).UnsafePointer() == orig {
		t.Fatal("the gateway kept the map of 2,048 channels for 48")
	}
	for _, gc := range gcs[2000:] {
		if g.lookup(gc.name) != gc {
			t.Fatalf("%s lost in the copy", gc.name)
		}
	}
}

// TestGatewayChannelIsOneAllocation: with up to six loops a channel's
// gateway entry holds its per-loop reader slots itself (one object of the
// 112-byte class, which no long-lived per-channel object uses, so that
// idle views leave no holes among the channels' state).
func TestGatewayChannelIsOneAllocation(t *testing.T) {
	g := newGateway(2)
	gc := g.acquire("c")
	if len(gc.readers) != 2 || &gc.readers[0] != &gc.inline[0] {
		t.Fatal("the reader slots of a 2-loop gateway are a separate allocation")
	}
	if size := unsafe.Sizeof(gwChan{}); size > 112 || size <= 96 {
		t.Fatalf("gwChan is %d bytes, want the 112-byte class", size)
	}
	if size := unsafe.Sizeof(role.StreamletRef{}); size > 96 {
		t.Fatalf("role.StreamletRef is %d bytes: choose gwChan's class again", size)
	}
	g.release(gc)
	big := newGateway(8)
	if gc := big.acquire("c"); len(gc.readers) != 8 {
		t.Fatalf("%d reader slots for 8 loops", len(gc.readers))
	}
}
