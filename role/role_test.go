package role

import "testing"

func TestChannelInfo_Locate(t *testing.T) {
	info := ChannelInfo{Earliest: 100, Next: 117, Streamlets: []StreamletRef{
		{ID: 1, First: 100, End: 107, Closed: true},
		{ID: 2, First: 107, End: 107, Closed: true}, // empty
		{ID: 3, First: 107, End: 114, Closed: true},
		{ID: 4, First: 114}, // open, 3 messages
	}}
	for _, tc := range []struct {
		p    uint64
		want int
	}{
		{0, -1}, {99, -1}, {100, 0}, {106, 0}, {107, 2}, {113, 2},
		{114, 3}, {116, 3}, {117, -1}, {1 << 62, -1},
	} {
		if got := info.Locate(tc.p); got != tc.want {
			t.Errorf("Locate(%d) = %d, want %d", tc.p, got, tc.want)
		}
	}
	closed := ChannelInfo{Earliest: 100, Next: 107, Streamlets: []StreamletRef{{ID: 1, First: 100, End: 107, Closed: true}}}
	if got := closed.Locate(107); got != -1 {
		t.Errorf("Locate past a closed end = %d", got)
	}
	var empty ChannelInfo
	if got := empty.Locate(1); got != -1 {
		t.Errorf("Locate in an empty channel = %d", got)
	}
}
