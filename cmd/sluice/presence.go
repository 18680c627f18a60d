package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-rtm/sluice/client"
)

const presenceDescription = `
Prints who is in CHANNEL (its presence members, on every node of a
cluster) and how busy it is (its occupancy), one line each, tab-separated:
    occupancy SUBSCRIBERS PUBLISHERS MEMBERS
    member    CLIENT_ID NODE CONN INFO
then "partial" if the server holds fewer members than the channel has (a
memory limit, or another node's members on their way). CLIENT_ID is the
member's token subject (empty without), NODE and CONN its connection, INFO
its token's client info (0x and hex digits when it is not printable text
without tabs). With --counts only the occupancy line is printed.

With --watch it then subscribes to the channel's presence events and
occupancy and prints, as they come,
    join      CLIENT_ID NODE CONN INFO
    leave     CLIENT_ID NODE CONN INFO
    occupancy SUBSCRIBERS PUBLISHERS MEMBERS [paused]
("paused": the channel has more members than the server sends joins and
leaves for, until an occupancy line without it), until interrupted (exit
0) or --count N events were printed. --enter makes the watcher a member
itself while it runs. Exit status 1 if the query or subscription fails, 2
for a bad command line. Flags may come before or after CHANNEL.`

// presenceConfig is the parsed presence command line.
type presenceConfig struct {
	server  string
	channel string
	counts  bool
	watch   bool
	enter   bool
	count   int
	timeout time.Duration
	conn    connFlags
}

func parsePresence(fs *flag.FlagSet, args []string) (presenceConfig, error) {
	cfg := presenceConfig{server: defaultServer, timeout: 10 * time.Second}
	fs.StringVar(&cfg.server, "server", cfg.server, "`HOST:PORT` of the server (a comma-separated list for a cluster)")
	fs.BoolVar(&cfg.counts, "counts", false, "print the occupancy only, not the members")
	fs.BoolVar(&cfg.watch, "watch", false, "then print joins, leaves and occupancy changes as they come")
	fs.BoolVar(&cfg.enter, "enter", false, "with --watch: be a member of the channel while watching")
	fs.IntVar(&cfg.count, "count", 0, "with --watch: exit after `N` events (0 = run until interrupted)")
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "how long connecting and querying may take, `DUR`")
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
	case !cfg.watch && (cfg.enter || cfg.count > 0):
		return cfg, errors.New("--enter and --count need --watch")
	}
	cfg.channel = pos[0]
	return cfg, nil
}

func runPresence(ctx context.Context, std stdio, args []string) int {
	fs := newFlagSet("presence", "[--server HOST:PORT] CHANNEL [--counts] [--watch [--enter] [--count N]]", presenceDescription)
	cfg, err := parsePresence(fs, args)
	if code, done := parseExit(fs, std, err); done {
		return code
	}
	copts, err := cfg.conn.options()
	if err != nil {
		return usageError(fs, std, err)
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	conn, err := client.Dial(dctx, cfg.server, append(copts, client.WithName("sluice-presence"))...)
	if err != nil {
		return presenceFailed(ctx, std, err)
	}
	defer conn.Close()
	var sub *client.Subscription
	if cfg.watch {
		// Subscribe first: the query's answer then covers every change
		// before the events printed after it.
		opts := []client.SubOption{client.WithPresenceEvents(), client.WithOccupancy()}
		if cfg.enter {
			opts = append(opts, client.WithPresence())
		}
		if sub, err = conn.Subscribe(dctx, cfg.channel, opts...); err != nil {
			return presenceFailed(ctx, std, err)
		}
	}
	st, err := conn.Presence(dctx, cfg.channel)
	if err != nil {
		return presenceFailed(ctx, std, err)
	}
	w := bufio.NewWriter(std.out)
	defer w.Flush()
	writeOcc(w, st.Occupancy, false)
	if !cfg.counts {
		for _, m := range st.Members {
			writeMember(w, "member", m)
		}
		if st.Partial {
			w.WriteString("partial\n")
		}
	}
	if sub == nil {
		return exitOK
	}
	return watchPresence(ctx, std, w, sub, cfg.count)
}

// watchPresence prints sub's presence events until ctx ends or count
// (if > 0) were printed; the first occupancy event, which repeats the
// query's counts, is not printed.
func watchPresence(ctx context.Context, std stdio, w *bufio.Writer, sub *client.Subscription, count int) int {
	if err := w.Flush(); err != nil {
		fmt.Fprintf(std.err, "sluice presence: %v\n", err)
		return exitFail
	}
	n, first := 0, true
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			_ = w.Flush()
			return presenceFailed(ctx, std, err)
		}
		switch ev.Kind {
		case client.KindJoin:
			writeMember(w, "join", ev.Member)
		case client.KindLeave:
			writeMember(w, "leave", ev.Member)
		case client.KindOccupancy:
			if first {
				first = false
				continue
			}
			writeOcc(w, ev.Occupancy, ev.EventsPaused)
		default:
			continue // the channel's messages and gaps
		}
		if err := w.Flush(); err != nil {
			fmt.Fprintf(std.err, "sluice presence: %v\n", err)
			return exitFail
		}
		if n++; count > 0 && n >= count {
			return exitOK
		}
	}
}

func writeOcc(w *bufio.Writer, o client.Occupancy, paused bool) {
	fmt.Fprintf(w, "occupancy\t%d\t%d\t%d", o.Subscribers, o.Publishers, o.Members)
	if paused {
		w.WriteString("\tpaused")
	}
	w.WriteByte('\n')
}

func writeMember(w *bufio.Writer, what string, m client.Member) {
	w.WriteString(what)
	w.WriteByte('\t')
	if printableID([]byte(m.ClientID)) {
		w.WriteString(m.ClientID)
	} else {
		w.WriteString("0x" + hex.EncodeToString([]byte(m.ClientID)))
	}
	w.WriteByte('\t')
	w.WriteString(m.Node)
	w.WriteByte('\t')
	w.WriteString(strconv.FormatUint(m.Conn, 10))
	w.WriteByte('\t')
	if printableID(m.Info) {
		w.Write(m.Info)
	} else {
		w.WriteString("0x" + hex.EncodeToString(m.Info))
	}
	w.WriteByte('\n')
}

// presenceFailed maps an error to the exit status: an interrupt is a
// normal end (0), anything else a failure (1).
func presenceFailed(ctx context.Context, std stdio, err error) int {
	if ctx.Err() != nil {
		return exitOK
	}
	fmt.Fprintf(std.err, "sluice presence: %v\n", err)
	return exitFail
}
