package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluice-rtm/sluice/client"
	"github.com/sluice-rtm/sluice/wire"
)

const pubDescription = `
Publishes each MESSAGE argument to CHANNEL, or, with no MESSAGE, each line
of standard input (without its line ending; an empty line is an empty
message). Publishes are pipelined, and the position of each message is
printed on its own line, in the order of the messages, as its
acknowledgement arrives. On the first failure the error goes to standard
error and nothing more is printed. Exit status 0 only if every message was
acknowledged; 1 if one was not (a message whose acknowledgement was lost
with the connection may or may not have been published); 2 for a bad
command line. Flags may come before or after CHANNEL; use -- before a
MESSAGE that starts with '-'.

--header KEY=VALUE (repeatable) adds a header to every message: KEY is 1 to
255 letters, digits or !#$%&'*+-.^_` + "`" + `|~, VALUE UTF-8 without control
characters (the first '=' ends the key). --msg-id ID gives the message a
message id (1 to 255 bytes); it takes exactly one MESSAGE. Publishing the
same ID to the same channel again within the server's dedup window (2
minutes by default) stores nothing and prints the first message's
position again, so a pub that failed with an unknown outcome can simply be
run again. --idempotent gives every message an automatic id and, if the
connection is lost before an acknowledgement, reconnects and publishes it
again (each message is stored once). Headers and ids need a server that
accepts them.`

// pubConfig is the parsed pub command line.
type pubConfig struct {
	server   string
	channel  string
	messages []string // nil: read standard input
	window   int
	timeout  time.Duration
	conn     connFlags
	headers  headerFlag
	msgID    string
	idem     bool
}

// headerFlag is the repeatable --header KEY=VALUE.
type headerFlag []client.Header

func (h *headerFlag) String() string { return "" }

func (h *headerFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q is not KEY=VALUE", s)
	}
	hs := append(*h, client.Header{Key: k, Value: v})
	if err := wire.CheckHeaders(hs); err != nil {
		return err
	}
	*h = hs
	return nil
}

func parsePub(fs *flag.FlagSet, args []string) (pubConfig, error) {
	cfg := pubConfig{server: defaultServer, window: 256, timeout: 10 * time.Second}
	fs.StringVar(&cfg.server, "server", cfg.server, "`HOST:PORT` of the server (a comma-separated list for a cluster)")
	fs.IntVar(&cfg.window, "window", cfg.window, "publishes awaiting acknowledgement at once, `N`")
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "how long to wait for connecting and for each acknowledgement, `DUR`")
	fs.Var(&cfg.headers, "header", "add the header `KEY=VALUE` to every message (repeatable)")
	fs.StringVar(&cfg.msgID, "msg-id", "", "publish the one MESSAGE with message id `ID` (idempotent within the dedup window)")
	fs.BoolVar(&cfg.idem, "idempotent", false, "automatic message ids; resend after a lost connection without duplicates")
	cfg.conn.bind(fs)
	pos, err := parseInterspersed(fs, args)
	switch {
	case err != nil:
		return cfg, err
	case len(pos) == 0:
		return cfg, errors.New("missing CHANNEL")
	case cfg.msgID != "" && len(pos) != 2:
		return cfg, fmt.Errorf("--msg-id takes exactly one MESSAGE, got %d", len(pos)-1)
	case cfg.msgID != "" && wire.CheckMsgID([]byte(cfg.msgID)) != nil:
		return cfg, fmt.Errorf("--msg-id: %w", wire.CheckMsgID([]byte(cfg.msgID)))
	case cfg.window < 1:
		return cfg, fmt.Errorf("--window must be at least 1, got %d", cfg.window)
	case cfg.timeout <= 0:
		return cfg, fmt.Errorf("--timeout must be positive, got %v", cfg.timeout)
	}
	cfg.channel = pos[0]
	if len(pos) > 1 {
		cfg.messages = pos[1:]
	}
	return cfg, nil
}

func runPub(ctx context.Context, std stdio, args []string) int {
	fs := newFlagSet("pub", "[--server HOST:PORT] [--header KEY=VALUE ...] [--msg-id ID] [--idempotent] CHANNEL [MESSAGE ...]", pubDescription)
	cfg, err := parsePub(fs, args)
	if code, done := parseExit(fs, std, err); done {
		return code
	}
	copts, err := cfg.conn.options()
	if err != nil {
		return usageError(fs, std, err)
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	copts = append(copts, client.WithName("sluice-pub"), client.WithReconnect(cfg.idem), client.WithMaxPending(cfg.window))
	if cfg.idem {
		copts = append(copts, client.WithIdempotence(0))
	}
	conn, err := client.Dial(dctx, cfg.server, copts...)
	cancel()
	if err != nil {
		fmt.Fprintf(std.err, "sluice pub: %v\n", err)
		return exitFail
	}
	defer conn.Close()

	next := messageSource(cfg.messages, std.in)
	acks := make(chan *client.PubAck, cfg.window)
	printed := make(chan bool, 1)
	go func() { printed <- printPositions(ctx, std, acks, cfg.timeout) }()
	ok := true
	for {
		msg, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintf(std.err, "sluice pub: reading standard input: %v\n", err)
			ok = false
			break
		}
		a, err := conn.PublishMsgAsync(ctx, cfg.channel, client.Msg{Payload: msg, Headers: cfg.headers, ID: []byte(cfg.msgID)})
		if err != nil {
			fmt.Fprintf(std.err, "sluice pub: %v\n", err)
			ok = false
			break
		}
		acks <- a
	}
	close(acks)
	if !<-printed || !ok {
		return exitFail
	}
	return exitOK
}

// printPositions prints the position of each acknowledged publish in
// order. After the first failure it reports the error and prints nothing
// more (so line i of the output is always message i). It reports whether
// every publish was acknowledged.
func printPositions(ctx context.Context, std stdio, acks <-chan *client.PubAck, timeout time.Duration) bool {
	w := bufio.NewWriter(std.out)
	defer w.Flush()
	ok := true
	for a := range acks {
		if !ok {
			continue // drain; the outcome no longer matters for the output
		}
		select {
		case <-a.Done():
		default:
			_ = w.Flush() // show what is known while waiting
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		pos, err := a.Wait(actx)
		cancel()
		if err != nil {
			_ = w.Flush()
			fmt.Fprintf(std.err, "sluice pub: %v\n", err)
			ok = false
			continue
		}
		fmt.Fprintln(w, pos)
	}
	return ok
}

// messageSource returns the messages one at a time: the arguments, or the
// lines of in. It returns io.EOF after the last one.
func messageSource(args []string, in io.Reader) func() ([]byte, error) {
	if args != nil {
		i := 0
		return func() ([]byte, error) {
			if i == len(args) {
				return nil, io.EOF
			}
			i++
			return []byte(args[i-1]), nil
		}
	}
	r := bufio.NewReader(in)
	return func() ([]byte, error) {
		line, err := r.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			return nil, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		return line, nil
	}
}
