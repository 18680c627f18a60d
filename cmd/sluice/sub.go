package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-rtm/sluice/client"
)

const subDescription = `
Subscribes to CHANNEL and prints one line per message to standard output:
POSITION, a tab, then the payload's bytes as they are (hex-encoded with
--hex). Each gap notice goes to standard error as "gap FROM-TO REASON"
(REASON: expired, slow or lost). A resume that finds a new incarnation of
the channel (it was dropped after idling and used again, or a single server
restarted: a new epoch, positions counting from 1 again) prints "epoch
EPOCH from 1" there, then "gap 1-N lost" if its first messages are gone,
then its messages. With --filter EXPR only the messages for which the
CEL expression is true are printed, at their channel positions (for
example --filter 'headers.type == "trade" && payload.price > 100';
docs/filters.md); --count then counts those. The start is one of --from,
--last or --since (default: --from live). With --count N it exits 0
after N messages;
otherwise it runs until interrupted (SIGINT: exit 0). If the connection
drops it reconnects and resumes after the last message printed. Exit
status 1 if the subscription fails, 2 for a bad command line. Flags may
come before or after CHANNEL.

With --headers, each message line is followed by one line per header and
one for its message id, each starting with a tab, so that "grep -v
'^<TAB>'" keeps the message lines:
    POSITION<TAB>PAYLOAD
    <TAB>id<TAB>ID               (if the message has an id)
    <TAB>h<TAB>KEY<TAB>VALUE     (per header, in the publisher's order)
An id that is not printable UTF-8 without tabs (e.g. an automatic one of
pub --idempotent) is printed as 0x and its hex digits.`

// subConfig is the parsed sub command line.
type subConfig struct {
	server  string
	channel string
	start   client.SubOption
	count   int
	hex     bool
	headers bool
	filter  string
	timeout time.Duration
	conn    connFlags
}

func parseSub(fs *flag.FlagSet, args []string) (subConfig, error) {
	cfg := subConfig{server: defaultServer, timeout: 10 * time.Second}
	from := "live"
	var last uint64
	var since time.Duration
	fs.StringVar(&cfg.server, "server", cfg.server, "`HOST:PORT` of the server (a comma-separated list for a cluster)")
	fs.StringVar(&from, "from", from, "where to start: `live`, earliest, or a POSITION")
	fs.Uint64Var(&last, "last", 0, "start `N` messages back from the live edge")
	fs.DurationVar(&since, "since", 0, "start with the messages of the last `DUR`")
	fs.IntVar(&cfg.count, "count", 0, "exit after `N` messages (0 = run until interrupted)")
	fs.BoolVar(&cfg.hex, "hex", false, "print payloads hex-encoded")
	fs.BoolVar(&cfg.headers, "headers", false, "print each message's id and headers after it (format above)")
	fs.StringVar(&cfg.filter, "filter", "", "only the messages for which the CEL `EXPR` over headers and payload is true (docs/filters.md)")
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "how long connecting and subscribing may take, `DUR`")
	cfg.conn.bind(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return cfg, err
	}
	switch {
	case len(pos) == 0:
		return cfg, errors.New("missing CHANNEL")
	case len(pos) > 1:
		return cfg, fmt.Errorf("unexpected argument %q after CHANNEL", pos[1])
	case cfg.count < 0:
		return cfg, fmt.Errorf("--count must not be negative, got %d", cfg.count)
	case cfg.timeout <= 0:
		return cfg, fmt.Errorf("--timeout must be positive, got %v", cfg.timeout)
	}
	cfg.channel = pos[0]
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	starts := 0
	for _, n := range []string{"from", "last", "since"} {
		if set[n] {
			starts++
		}
	}
	if starts > 1 {
		return cfg, errors.New("give only one of --from, --last and --since")
	}
	switch {
	case set["last"]:
		cfg.start = client.Last(last)
	case set["since"]:
		if since <= 0 {
			return cfg, fmt.Errorf("--since must be positive, got %v", since)
		}
		cfg.start = client.Since(since)
	case from == "live":
		cfg.start = client.FromLive()
	case from == "earliest":
		cfg.start = client.FromEarliest()
	default:
		p, err := strconv.ParseUint(from, 10, 64)
		if err != nil || p == 0 {
			return cfg, fmt.Errorf("--from %q is not live, earliest or a position >= 1", from)
		}
		cfg.start = client.FromPosition(p)
	}
	return cfg, nil
}

func runSub(ctx context.Context, std stdio, args []string) int {
	fs := newFlagSet("sub", "[--server HOST:PORT] CHANNEL [--from live|earliest|POSITION] [--last N] [--since DUR] [--filter EXPR] [--count N] [--hex] [--headers]", subDescription)
	cfg, err := parseSub(fs, args)
	if code, done := parseExit(fs, std, err); done {
		return code
	}
	copts, err := cfg.conn.options()
	if err != nil {
		return usageError(fs, std, err)
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	conn, err := client.Dial(dctx, cfg.server, append(copts, client.WithName("sluice-sub"))...)
	if err != nil {
		return subFailed(ctx, std, err)
	}
	defer conn.Close()
	sopts := []client.SubOption{cfg.start}
	if cfg.filter != "" {
		sopts = append(sopts, client.WithFilter(cfg.filter))
	}
	sub, err := conn.Subscribe(dctx, cfg.channel, sopts...)
	if err != nil {
		return subFailed(ctx, std, err)
	}
	w := bufio.NewWriter(std.out)
	defer w.Flush()
	n := 0
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			_ = w.Flush()
			return subFailed(ctx, std, err)
		}
		switch ev.Kind {
		case client.KindMessage:
			w.WriteString(strconv.FormatUint(ev.Position, 10))
			w.WriteByte('\t')
			if cfg.hex {
				w.WriteString(hex.EncodeToString(ev.Payload))
			} else {
				w.Write(ev.Payload)
			}
			w.WriteByte('\n')
			if cfg.headers {
				writeHeaders(w, ev)
			}
			if n++; cfg.count > 0 && n >= cfg.count {
				return exitOK
			}
		case client.KindGap:
			_ = w.Flush() // keep stdout and stderr in event order
			fmt.Fprintf(std.err, "gap %d-%d %v\n", ev.Gap.From, ev.Gap.To, ev.Gap.Reason)
		case client.KindEpochChanged:
			_ = w.Flush()
			fmt.Fprintf(std.err, "epoch %d from %d\n", ev.Epoch, ev.Position)
		}
		if sub.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				fmt.Fprintf(std.err, "sluice sub: %v\n", err)
				return exitFail
			}
		}
	}
}

// writeHeaders prints ev's message id and headers in the --headers format.
func writeHeaders(w *bufio.Writer, ev client.Event) {
	if len(ev.MsgID) > 0 {
		w.WriteString("\tid\t")
		if printableID(ev.MsgID) {
			w.Write(ev.MsgID)
		} else {
			w.WriteString("0x")
			w.WriteString(hex.EncodeToString(ev.MsgID))
		}
		w.WriteByte('\n')
	}
	for _, h := range ev.Headers {
		w.WriteString("\th\t")
		w.WriteString(h.Key)
		w.WriteByte('\t')
		w.WriteString(h.Value)
		w.WriteByte('\n')
	}
}

// printableID reports whether id can be printed as it is: valid UTF-8
// without control characters, not starting with "0x".
func printableID(id []byte) bool {
	if !utf8.Valid(id) || bytes.HasPrefix(id, []byte("0x")) {
		return false
	}
	for _, r := range string(id) {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// subFailed maps an error to the exit status: an interrupt is a normal
// end (0), anything else a failure (1).
func subFailed(ctx context.Context, std stdio, err error) int {
	if ctx.Err() != nil {
		return exitOK
	}
	fmt.Fprintf(std.err, "sluice sub: %v\n", err)
	return exitFail
}
