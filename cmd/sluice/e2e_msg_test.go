package main

import (
	"regexp"
	"strconv"
	"testing"
)

// TestEndToEndHeadersAndMsgID: the CLI cases of issue 18 against a real
// server: pub --header (repeatable) and --msg-id, the same --msg-id again
// prints the same position and stores nothing, sub --headers prints the
// id and the headers after each message in the documented format, and sub
// without --headers prints what it printed before.
func TestEndToEndHeadersAndMsgID(t *testing.T) {
	addr := startEngine(t)
	ctx := ctxE2E(t)
	pub := func(args ...string) uint64 {
		t.Helper()
		code, out, errs := runCmd(ctx, "", append([]string{"pub", "--server", addr}, args...)...)
		if code != exitOK || errs != "" {
			t.Fatalf("pub %q: code %d stderr %q", args, code, errs)
		}
		return positions(t, out, 1)[0]
	}
	first := pub("orders", "--header", "traceparent=00-0af7-b7ad-01", "--header", "ct=application/json", "--msg-id", "order-17", `{"n":17}`)
	if again := pub("orders", "--msg-id", "order-17", `{"n":17}`); again != first {
		t.Fatalf("the same --msg-id printed %d, first %d", again, first)
	}
	next := pub("orders", "plain")
	if next != first+1 {
		t.Fatalf("next position %d after %d: the repeat was stored", next, first)
	}
	code, out, errs := runCmd(ctx, "", "sub", "orders", "--server", addr, "--from", "earliest", "--count", "2", "--headers")
	p1, p2 := strconv.FormatUint(first, 10), strconv.FormatUint(next, 10)
	want := p1 + "\t{\"n\":17}\n\tid\torder-17\n\th\ttraceparent\t00-0af7-b7ad-01\n\th\tct\tapplication/json\n" + p2 + "\tplain\n"
	if code != exitOK || out != want || errs != "" {
		t.Fatalf("sub --headers: code %d stderr %q output\n%q\nwant\n%q", code, errs, out, want)
	}
	code, out, _ = runCmd(ctx, "", "sub", "orders", "--server", addr, "--from", "earliest", "--count", "2")
	if want := p1 + "\t{\"n\":17}\n" + p2 + "\tplain\n"; code != exitOK || out != want {
		t.Fatalf("sub: %q, want %q", out, want)
	}
	// --idempotent: automatic ids, printed in hex by sub --headers.
	code, out, errs = runCmd(ctx, "a\nb\n", "pub", "--server", addr, "--idempotent", "auto")
	if code != exitOK || errs != "" {
		t.Fatalf("pub --idempotent: %d %q", code, errs)
	}
	positions(t, out, 2)
	code, out, _ = runCmd(ctx, "", "sub", "auto", "--server", addr, "--from", "earliest", "--count", "1", "--headers")
	if code != exitOK || !regexp.MustCompile(`^\d+\ta\n\tid\t0x[0-9a-f]{40}\n$`).MatchString(out) {
		t.Fatalf("sub --headers of an automatic id: %q", out)
	}
	// A bad header is a command-line error.
	if code, _, errs := runCmd(ctx, "", "pub", "--server", addr, "orders", "--header", "bad key=v", "m"); code != exitUsage || errs == "" {
		t.Fatalf("bad header: code %d stderr %q", code, errs)
	}
}
