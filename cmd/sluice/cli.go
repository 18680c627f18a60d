package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"

	"github.com/sluice-rtm/sluice/wire"
)

// version is the release of this binary (set with -ldflags "-X main.version=...").
var version = "0.1.0-dev"

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and failed
	exitUsage = 2 // bad command line
)

// defaultServer is where pub and sub connect and serve listens by default.
const defaultServer = "127.0.0.1:7400"

// stdio is a command's standard streams (replaced in tests).
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// command is one subcommand. run gets the arguments after the subcommand's
// name and returns the exit status; ctx ends on SIGINT/SIGTERM.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, std stdio, args []string) int
}

// commands is the subcommand table: add new ones here.
var commands []command

func init() {
	commands = []command{
		{"serve", "run a Sluice server", runServe},
		{"pub", "publish messages to a channel and print their positions", runPub},
		{"sub", "subscribe to a channel and print its messages", runSub},
		{"presence", "print who is in a channel and its occupancy; --watch follows joins and leaves", runPresence},
		{"bench", "run load benchmarks against a Sluice server", runBench},
		{"cluster", "inspect a cluster: 'sluice cluster status' lists its members, 'sluice cluster drain' drains one", runCluster},
		{"token", "make an authentication token and its hash for the config file", runToken},
		{"version", "print the version", runVersion},
		{"help", "show help for sluice or a subcommand", runHelp},
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// run dispatches args (without the program name) to a subcommand.
func run(ctx context.Context, std stdio, args []string) int {
	if len(args) == 0 {
		usage(std.err)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(std.out)
		return exitOK
	}
	cmd, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(std.err, "sluice: unknown command %q\n\n", args[0])
		usage(std.err)
		return exitUsage
	}
	return cmd.run(ctx, std, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: sluice COMMAND [FLAGS] [ARGS]")
	fmt.Fprintln(w, "\nSluice is a real-time publish/subscribe server with short, replayable history.")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'sluice COMMAND --help' (or 'sluice help COMMAND') for a command's flags.")
}

func runHelp(ctx context.Context, std stdio, args []string) int {
	if len(args) == 0 {
		usage(std.out)
		return exitOK
	}
	cmd, ok := lookup(args[0])
	if !ok || cmd.name == "help" {
		if !ok {
			fmt.Fprintf(std.err, "sluice help: unknown command %q\n", args[0])
			return exitUsage
		}
		usage(std.out)
		return exitOK
	}
	// "sluice help cluster status" is "sluice cluster status --help".
	return cmd.run(ctx, std, append(slices.Clone(args[1:]), "--help"))
}

func runVersion(_ context.Context, std stdio, args []string) int {
	fs := newFlagSet("version", "", "Prints the version of sluice, its protocol and its Go toolchain.")
	if code, done := parseOnly(fs, std, args); done {
		return code
	}
	fmt.Fprintf(std.out, "sluice %s (protocol v%d, %s %s/%s)\n", version, wire.Version1, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}

// newFlagSet makes a subcommand's flag set whose usage text is synopsis,
// then description, then the flags.
func newFlagSet(name, synopsis, description string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: sluice %s %s\n\n%s\n", name, synopsis, strings.TrimSpace(description))
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(w, "\nFlags (-flag and --flag are the same):")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseInterspersed parses args with fs, allowing flags before and after
// positional arguments (the flag package alone stops at the first
// positional one). "--" ends the flags: everything after it is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseCommandLine parses args; on --help it prints the usage to stdout,
// on an error the error and usage to stderr. done reports that the
// command should exit with code.
func parseCommandLine(fs *flag.FlagSet, std stdio, args []string) (pos []string, code int, done bool) {
	pos, err := parseInterspersed(fs, args)
	if code, done := parseExit(fs, std, err); done {
		return nil, code, true
	}
	return pos, 0, false
}

// parseExit turns the error of a command-line parse into the command's
// exit: --help prints the usage to stdout (exit 0), any other error prints
// it with the usage to stderr (exitUsage). done is false when err is nil.
func parseExit(fs *flag.FlagSet, std stdio, err error) (code int, done bool) {
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(std.out)
		fs.Usage()
		return exitOK, true
	case err != nil:
		return usageError(fs, std, err), true
	}
	return 0, false
}

// parseOnly is parseCommandLine for commands without positional arguments.
func parseOnly(fs *flag.FlagSet, std stdio, args []string) (int, bool) {
	pos, code, done := parseCommandLine(fs, std, args)
	if !done && len(pos) > 0 {
		return usageError(fs, std, fmt.Errorf("unexpected argument %q", pos[0])), true
	}
	return code, done
}

// usageError prints err and the usage to stderr and returns exitUsage.
func usageError(fs *flag.FlagSet, std stdio, err error) int {
	fmt.Fprintf(std.err, "sluice %s: %v\n\n", fs.Name(), err)
	fs.SetOutput(std.err)
	fs.Usage()
	return exitUsage
}
