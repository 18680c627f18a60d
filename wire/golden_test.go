package wire_test

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// readHex parses a golden file: hex byte pairs, white space ignored, '#'
// comments to the end of the line.
func readHex(t testing.TB, path string) []byte {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var digits strings.Builder
	for _, line := range strings.Split(string(src), "\n") {
		line, _, _ = strings.Cut(line, "#")
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

// TestGolden checks every frame against its golden vector in both
// directions: encode(value) == golden and decode(golden) == value.
func TestGolden(t *testing.T) {
	covered := map[wire.Type]bool{}
	names := map[string]bool{}
	for _, tc := range validCases() {
		names[tc.name+".hex"] = true
		t.Run(tc.name, func(t *testing.T) {
			golden := readHex(t, filepath.Join("testdata", tc.name+".hex"))
			if !bytes.Equal(tc.frame, golden) {
				t.Fatalf("encoded\n% x\ngolden\n% x", tc.frame, golden)
			}
			h, body, n, err := wire.Split(golden, testMaxBody)
			if err != nil || n != len(golden) {
				t.Fatalf("Split(golden): n=%d err=%v", n, err)
			}
			v, err := decodeAny(h, body)
			if err != nil || !reflect.DeepEqual(msg{h, v}, tc.want) {
				t.Fatalf("decode(golden) = %#v, %v\nwant %#v", msg{h, v}, err, tc.want)
			}
			covered[h.Type] = true
		})
	}
	for ty := wire.TypeHello; ty <= wire.TypeUnsubscribed; ty++ {
		if !covered[ty] {
			t.Errorf("no golden vector for %v", ty)
		}
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "*.hex"))
	for _, f := range files {
		if !names[filepath.Base(f)] {
			t.Errorf("golden file %s has no test case", f)
		}
	}
}
