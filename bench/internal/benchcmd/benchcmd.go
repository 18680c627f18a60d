// Package benchcmd is what the benchmark commands share (bench/cmd/wscompare
// in this module; bench/peer/cmd/compare and bench/peer/cmd/rbench in the
// NATS module, which may import it because its import path lies under
// bench/): the process entry point, the flags every one of them takes
// (runs, CPU pinning, this process's CPU profile), and the child-process
// server mode that profiles a server for its whole life, and the start of
// the Sluice server such a child runs; Run is the body that chooses
// between the child modes and the load generator.
//
// It lives here, not in bench/peer, because wscompare is in the main module
// and the main module never depends on the NATS module.
//
// Concurrency: Main, Run, Flags.Setup and Serve are called from a
// command's main goroutine; nothing here is shared.
package benchcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-rtm/sluice/bench"
	"github.com/sluice-rtm/sluice/engine"
)

// RunFunc is a command's body: it parses args, writes to stdout and
// stderr, and returns the process's exit code.
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// Main runs run with the process's arguments and a context that ends at
// SIGINT or SIGTERM (how a parent stops its child servers), then exits
// with run's code.
func Main(run RunFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// ChildPrefix starts the flag of every hidden child-process mode
// (--serve-sluice, --serve-nats-node, ...).
const ChildPrefix = "--serve"

// MainIfChild is for a command's TestMain: when the test binary was started
// as one of the command's child processes (its first argument starts with
// ChildPrefix, as the command passes it to os.Executable), it runs as that
// child and exits; otherwise it returns and the tests run.
func MainIfChild(run RunFunc) {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], ChildPrefix) {
		Main(run)
	}
}

// Flags are the flags every benchmark command takes. Zero is no pinning,
// no profile.
type Flags struct {
	Runs       int    // --runs: runs of each setup, alternated
	ServerCPUs string // --server-cpus: taskset -c list for the child servers
	ClientCPUs string // --client-cpus: CPU list for this load generator
	CPUProfile string // --cpuprofile: this process's CPU profile
}

// Register adds --runs (default runs; what says what is run, e.g. "each
// scenario per system"), --server-cpus, --client-cpus and --cpuprofile to
// fs.
func (f *Flags) Register(fs *flag.FlagSet, runs int, what string) {
	fs.IntVar(&f.Runs, "runs", runs, "runs of "+what+", alternated, `N`")
	fs.StringVar(&f.ServerCPUs, "server-cpus", "", "pin the child-process servers to CPU `LIST` (taskset -c), e.g. 0")
	fs.StringVar(&f.ClientCPUs, "client-cpus", "", "pin this load generator to CPU `LIST`, e.g. 1")
	fs.StringVar(&f.CPUProfile, "cpuprofile", "", "write this process's CPU profile (the load generator; in a child-process mode, that server's) to `FILE`")
}

// ErrFlags marks a flag value Check refuses.
var ErrFlags = errors.New("benchcmd: bad flag")

// Check validates the values Register filled.
func (f *Flags) Check() error {
	if f.Runs < 1 {
		return fmt.Errorf("%w: --runs must be at least 1, got %d", ErrFlags, f.Runs)
	}
	for _, l := range []string{f.ServerCPUs, f.ClientCPUs} {
		if l == "" {
			continue
		}
		if _, err := bench.ParseCPUList(l); err != nil {
			return fmt.Errorf("%w: %w", ErrFlags, err)
		}
	}
	return nil
}

// Setup prepares this process as a load generator: it pins it to
// --client-cpus, raises its open-file limit, and starts the --cpuprofile
// profile. done stops the profile; it is never nil, also on error.
func (f *Flags) Setup() (done func(), err error) {
	done = func() {}
	if f.ClientCPUs != "" {
		if err := bench.PinSelf(f.ClientCPUs); err != nil {
			return done, err
		}
	}
	if _, err := bench.RaiseFileLimit(); err != nil {
		return done, err
	}
	return StartCPUProfile(f.CPUProfile)
}

// StartCPUProfile writes this process's CPU profile (pprof format) to path
// until stop is called; path "" profiles nothing. stop is never nil.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	pf, err := os.Create(path)
	if err != nil {
		return func() {}, fmt.Errorf("benchcmd: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		_ = pf.Close()
		return func() {}, fmt.Errorf("benchcmd: cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = pf.Close()
	}, nil
}

// StartEngine starts a Sluice server with opts (its logger discarded when
// opts.Logger is nil) for a child-process mode; stop shuts it down
// gracefully, bounded by 5 s: well inside the 10 s after which
// bench.ServerProc.Stop kills a child, so the child's profile is written.
func StartEngine(opts engine.Options) (srv *engine.Server, stop func(), err error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	srv, err = engine.Start(opts)
	if err != nil {
		return nil, nil, err
	}
	return srv, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// Serve is a child-process server mode: it starts the CPU profile to
// profile (if not ""), starts the server, waits until ctx ends (the parent
// sends SIGTERM), stops the server and then the profile, so the profile
// covers the server's whole life.
func Serve(ctx context.Context, profile string, start func() (stop func(), err error)) error {
	stopProf, err := StartCPUProfile(profile)
	if err != nil {
		return err
	}
	defer stopProf()
	stop, err := start()
	if err != nil {
		return err
	}
	<-ctx.Done()
	stop()
	return nil
}

// Run is what a benchmark command does once it has parsed its command
// line into f and the rest of its options, parseErr being what parsing
// returned: flag.ErrHelp (the usage was printed) exits 0, another parse
// error exits 2. When child is not nil the command line asked for a
// child-process server mode: it runs under Serve with f's --cpuprofile.
// Otherwise this process is the load generator: f.Setup prepares it, run
// measures, and Setup's done ends its profile. An error is printed to
// stderr after name and exits 1.
func Run(ctx context.Context, name string, stderr io.Writer, parseErr error, f *Flags,
	child func() (stop func(), err error), run func() error) int {
	if errors.Is(parseErr, flag.ErrHelp) {
		return 0
	}
	if parseErr != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, parseErr)
		return 2
	}
	var err error
	if child != nil {
		err = Serve(ctx, f.CPUProfile, child)
	} else {
		var done func()
		if done, err = f.Setup(); err == nil {
			err = run()
		}
		done()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}
