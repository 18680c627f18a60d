package engine

import (
	"fmt"
	"reflect"
	"testing"
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
