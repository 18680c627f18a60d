package view

import "testing"

// FuzzDecodeMeta: a member's gossiped metadata comes from the network
// (memberlist, at most 512 bytes). Whatever the bytes, DecodeMeta does not
// panic; what it accepts names a client address and survives its own
// encoding unchanged, so every node reads the same view of that member.
func FuzzDecodeMeta(f *testing.F) {
	f.Add([]byte(`{"a":"10.0.0.1:7000","c":4,"s":3,"ch":2,"cn":9,"mi":1.5,"bi":300,"d":true,"i":"i1","r":"10.0.0.1:7947","sid":"s1","b":true,"sv":true}`))
	f.Add([]byte(`{"a":"x","c":1e308,"mi":-0,"i":"\u00ff\ufffd"}`))
	f.Add([]byte(`{"a":"x","a":"y","s":-1}`))
	f.Add([]byte(`{"c":4}`))
	f.Add([]byte(`[]`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, ok := DecodeMeta(b)
		if !ok {
			if m != (Meta{}) {
				t.Fatalf("refused %q but returned %+v", b, m)
			}
			return
		}
		if m.Client == "" {
			t.Fatalf("accepted %q without a client address", b)
		}
		again, ok := DecodeMeta(m.Encode())
		if !ok || again != m {
			t.Fatalf("%q: decoded %+v, its encoding %s decodes to %+v (%v)", b, m, m.Encode(), again, ok)
		}
	})
}
