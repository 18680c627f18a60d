package main

import (
	"strings"
	"testing"
)

// TestEndToEndSubFilter: `sub --filter` prints only the matching messages,
// at their channel positions; a bad expression fails with INVALID_FILTER.
func TestEndToEndSubFilter(t *testing.T) {
	ctx := ctxE2E(t)
	addr := startEngine(t)
	var pos []string
	for i, m := range []struct{ typ, payload string }{
		{"trade", `{"price":101}`}, {"quote", `{"price":150}`}, {"trade", `{"price":99}`}, {"trade", `{"price":120}`},
	} {
		code, out, errs := runCmd(ctx, "", "pub", "--server", addr, "--header", "type="+m.typ, "ticks", m.payload)
		if code != exitOK {
			t.Fatalf("pub %d: %d %s", i, code, errs)
		}
		pos = append(pos, strings.TrimSpace(out))
	}
	code, out, errs := runCmd(ctx, "", "sub", "ticks", "--server", addr, "--from", "earliest", "--count", "2",
		"--filter", `headers.type == "trade" && payload.price > 100`)
	want := pos[0] + "\t{\"price\":101}\n" + pos[3] + "\t{\"price\":120}\n"
	if code != exitOK || out != want {
		t.Fatalf("sub --filter: %d %q %s; want %q", code, out, errs, want)
	}
	code, _, errs = runCmd(ctx, "", "sub", "ticks", "--server", addr, "--filter", `payload.price >`)
	if code != exitFail || !strings.Contains(errs, "INVALID_FILTER") {
		t.Fatalf("bad filter: %d %s", code, errs)
	}
}
