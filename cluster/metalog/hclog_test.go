package metalog

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestHCLog: hclog's levels land at the matching slog levels (those the
// handler disables are dropped), the logger's name is the "component"
// attribute, and With, Named and ResetNamed keep their attributes.
func TestHCLog(t *testing.T) {
	var buf bytes.Buffer
	l := newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), "raft")
	l.Trace("trace-line")
	l.Debug("debug-line")
	l.Info("i-line", "k", 1)
	l.Warn("w-line")
	l.Error("e-line")
	l.With("peer", "b").Named("net").Info("named-line")
	l.With("peer", "c").ResetNamed("wal").Warn("reset-line")
	out := buf.String()
	for _, want := range []string{
		`level=INFO msg=i-line component=raft k=1`,
		`level=WARN msg=w-line component=raft`,
		`level=ERROR msg=e-line component=raft`,
		`level=INFO msg=named-line component=raft.net peer=b`,
		`level=WARN msg=reset-line component=wal peer=c`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "trace-line") || strings.Contains(out, "debug-line") {
		t.Errorf("disabled levels written:\n%s", out)
	}
	if l.IsDebug() || !l.IsInfo() || l.GetLevel() != hclog.Info {
		t.Error("level queries")
	}
	l.Error("closed-line", "error", fmt.Errorf("read: %w", net.ErrClosed))
	if strings.Contains(buf.String(), "closed-line") {
		t.Error("an error about a connection closed here was logged above Debug")
	}
	l.StandardLogger(nil).Print("std-line")
	if !strings.Contains(buf.String(), "msg=std-line") {
		t.Error("standard logger")
	}
}
