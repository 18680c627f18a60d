package metalog

import (
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// slogLogger routes hashicorp's hclog output (raft, its transport, the
// WAL) to the server's slog logger. Levels map one to one (Trace to
// slog's Debug-4), the logger's name goes in the attribute "component", and
// the slog handler decides what is written: a disabled level costs one
// Enabled call. A line about a connection this node closed drops to Debug. raft's Error lines are mostly about unreachable peers
// (failed heartbeats and appends, with backoff); they stay errors, since an
// operator wants to see a peer the leader cannot reach.
type slogLogger struct {
	base    *slog.Logger // without the component and implied attributes
	l       *slog.Logger // base with them
	name    string
	implied []any
}

// newHCLog returns an hclog.Logger writing to l under name.
func newHCLog(l *slog.Logger, name string) hclog.Logger { return build(l, name, nil) }

func build(base *slog.Logger, name string, implied []any) *slogLogger {
	return &slogLogger{base: base, l: base.With("component", name).With(implied...), name: name, implied: implied}
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (s *slogLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	lv := slogLevel(level)
	if lv > slog.LevelDebug && closedByUs(args) {
		lv = slog.LevelDebug
	}
	ctx := context.Background()
	if !s.l.Enabled(ctx, lv) {
		return
	}
	s.l.Log(ctx, lv, msg, args...)
}

// closedByUs reports whether an argument is an error about a connection
// this node closed (raft's transport reports its handlers' reads on
// connections closed by Shutdown or by the stream layer as errors): that is
// not a fault, and it stays below the operator's usual level.
func closedByUs(args []any) bool {
	for _, a := range args {
		if err, ok := a.(error); ok && errors.Is(err, net.ErrClosed) {
			return true
		}
	}
	return false
}

func (s *slogLogger) Trace(msg string, args ...any) { s.Log(hclog.Trace, msg, args...) }
func (s *slogLogger) Debug(msg string, args ...any) { s.Log(hclog.Debug, msg, args...) }
func (s *slogLogger) Info(msg string, args ...any)  { s.Log(hclog.Info, msg, args...) }
func (s *slogLogger) Warn(msg string, args ...any)  { s.Log(hclog.Warn, msg, args...) }
func (s *slogLogger) Error(msg string, args ...any) { s.Log(hclog.Error, msg, args...) }

func (s *slogLogger) enabled(level hclog.Level) bool {
	return s.l.Enabled(context.Background(), slogLevel(level))
}

func (s *slogLogger) IsTrace() bool { return s.enabled(hclog.Trace) }
func (s *slogLogger) IsDebug() bool { return s.enabled(hclog.Debug) }
func (s *slogLogger) IsInfo() bool  { return s.enabled(hclog.Info) }
func (s *slogLogger) IsWarn() bool  { return s.enabled(hclog.Warn) }
func (s *slogLogger) IsError() bool { return s.enabled(hclog.Error) }

func (s *slogLogger) ImpliedArgs() []any { return s.implied }

func (s *slogLogger) With(args ...any) hclog.Logger {
	return build(s.base, s.name, append(s.implied[:len(s.implied):len(s.implied)], args...))
}

func (s *slogLogger) Name() string { return s.name }

func (s *slogLogger) Named(name string) hclog.Logger {
	if s.name != "" {
		name = s.name + "." + name
	}
	return s.ResetNamed(name)
}

func (s *slogLogger) ResetNamed(name string) hclog.Logger { return build(s.base, name, s.implied) }

// SetLevel is ignored: the slog handler decides.
func (s *slogLogger) SetLevel(hclog.Level) {}

// GetLevel returns the most detailed level the handler writes.
func (s *slogLogger) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if s.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

func (s *slogLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(s.StandardWriter(opts), "", 0)
}

func (s *slogLogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return stdWriter{s}
}

// stdWriter logs each write as one Info line.
type stdWriter struct{ s *slogLogger }

func (w stdWriter) Write(p []byte) (int, error) {
	w.s.Info(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
