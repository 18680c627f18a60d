package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat CPU times (100 on every
// mainstream Linux build; Go cannot call sysconf without cgo).
const clockTicks = 100

// ProcStat reads CPU time and resident memory of the process that runs the
// server under test. Pid 0 means the current process (an in-process server):
// CPU then comes from getrusage(RUSAGE_SELF), which also counts the load
// generator; a child process is read from /proc (see CPU) and counts the
// server alone. Safe for concurrent use.
type ProcStat struct {
	Pid int
}

// Source says where the numbers come from, for reports.
func (p ProcStat) Source() string {
	if p.Pid == 0 {
		return "getrusage(self): in-process server + load generator"
	}
	return fmt.Sprintf("/proc/%d/task/*/schedstat: server process only", p.Pid)
}

// CPU returns the process's CPU time so far. For a child process it is the
// sum of /proc/PID/task/*/schedstat (nanosecond resolution; threads that
// exited are not counted, which Go servers rarely do), falling back to
// utime+stime of /proc/PID/stat (10 ms resolution).
func (p ProcStat) CPU() (time.Duration, error) {
	if p.Pid == 0 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0, fmt.Errorf("bench: getrusage: %w", err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
	}
	if d, err := p.schedCPU(); err == nil {
		return d, nil
	}
	return p.statCPU()
}

// schedCPU sums the run time of every live thread of the process.
func (p ProcStat) schedCPU() (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", p.Pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("bench: cpu of %d: %w", p.Pid, err)
	}
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) < 1 {
			return 0, fmt.Errorf("bench: cpu of %d: malformed schedstat", p.Pid)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: cpu of %d: %w", p.Pid, err)
		}
		sum += ns
	}
	return time.Duration(sum), nil
}

// statCPU reads utime+stime from /proc/PID/stat.
func (p ProcStat) statCPU() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid))
	if err != nil {
		return 0, fmt.Errorf("bench: cpu of %d: %w", p.Pid, err)
	}
	// The command name (field 2) may hold spaces: fields count from the
	// last ')'. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: cpu of %d: malformed stat", p.Pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: cpu of %d: short stat", p.Pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("bench: cpu of %d: %w", p.Pid, err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// RSS returns the process's resident set size in bytes.
func (p ProcStat) RSS() (int64, error) {
	path := "/proc/self/status"
	if p.Pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", p.Pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("bench: rss: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: rss: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("bench: rss: no VmRSS in %s", path)
}

// ParseCPUList parses a Linux CPU list such as "0", "1-3" or "0,2-3".
func ParseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%w: cpu list %q", ErrConfig, s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 4096 {
				return nil, fmt.Errorf("%w: cpu list %q", ErrConfig, s)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// PinSelf restricts every thread of the current process to the CPUs of list
// (threads made later inherit it) and sets GOMAXPROCS to their number.
// Call it before the load starts, from any goroutine.
func PinSelf(list string) error {
	cpus, err := ParseCPUList(list)
	if err != nil {
		return err
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("bench: pin: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("bench: pin thread %d to %s: %w", tid, list, err)
		}
	}
	runtime.GOMAXPROCS(set.Count())
	return nil
}

// RaiseFileLimit raises the limit on open files as far as it may (to
// /proc/sys/fs/nr_open when the process may raise its hard limit, else to
// the hard limit), for the idle-connection scenario, and returns the new
// soft limit.
func RaiseFileLimit() (uint64, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("bench: getrlimit: %w", err)
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > rl.Max {
			if unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n}) == nil {
				return n, nil
			}
		}
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			return 0, fmt.Errorf("bench: setrlimit: %w", err)
		}
	}
	return rl.Cur, nil
}

// fileLimit returns the current soft limit on open files (0 if unknown).
func fileLimit() uint64 {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) != nil {
		return 0
	}
	return rl.Cur
}

// FreePort returns a "127.0.0.1:PORT" that was free a moment ago, for a
// server started as a child process.
func FreePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("bench: free port: %w", err)
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// childLogMu serialises the output of child processes written to a shared
// writer that is not a file.
var childLogMu sync.Mutex

type childLog struct{ w io.Writer }

// Write writes p under childLogMu.
func (c childLog) Write(p []byte) (int, error) {
	childLogMu.Lock()
	defer childLogMu.Unlock()
	return c.w.Write(p)
}

// ServerProc is a server under test running as a child process.
// Its methods may be called from one goroutine at a time.
type ServerProc struct {
	// Addr is the address the server listens on.
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartServerProc starts argv as a child process (under `taskset -c cpus`
// when cpus is not empty, so the server runs on those CPUs only), sends its
// output to log (nil: discarded), and waits up to 20 s until addr accepts
// TCP connections.
func StartServerProc(ctx context.Context, argv []string, addr, cpus string, log io.Writer) (*ServerProc, error) {
	return StartServerProcEnv(ctx, argv, nil, addr, cpus, log)
}

// StartServerProcEnv is StartServerProc with env ("KEY=VALUE" entries)
// added to the child's environment only: this process's own environment
// is not changed (a secret handed to the child this way is not seen by
// anything else this process starts).
func StartServerProcEnv(ctx context.Context, argv, env []string, addr, cpus string, log io.Writer) (*ServerProc, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: empty server command", ErrConfig)
	}
	if cpus != "" {
		if _, err := ParseCPUList(cpus); err != nil {
			return nil, err
		}
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if log != nil {
		if _, isFile := log.(*os.File); !isFile {
			log = childLog{log} // several children may share one writer
		}
		cmd.Stdout, cmd.Stderr = log, log
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", strings.Join(argv, " "), err)
	}
	sp := &ServerProc{Addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(sp.done) }()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(wctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
			return sp, nil
		}
		select {
		case <-sp.done:
			return nil, fmt.Errorf("bench: server %s exited before listening on %s", argv[0], addr)
		case <-wctx.Done():
			sp.Stop()
			return nil, fmt.Errorf("bench: server %s not listening on %s: %w", argv[0], addr, wctx.Err())
		case <-tick.C:
		}
	}
}

// Done is closed once the child process has exited (stopped, or on its
// own).
func (sp *ServerProc) Done() <-chan struct{} { return sp.done }

// Stat returns the ProcStat of the child process.
func (sp *ServerProc) Stat() ProcStat { return ProcStat{Pid: sp.cmd.Process.Pid} }

// Stop sends SIGTERM, waits up to 10 s for the process to exit, then kills
// it. It is idempotent.
func (sp *ServerProc) Stop() {
	select {
	case <-sp.done:
		return
	default:
	}
	_ = sp.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-sp.done:
	case <-t.C:
		_ = sp.cmd.Process.Kill()
		<-sp.done
	}
}

// LoadAvg returns the machine's 1-minute load average from /proc/loadavg,
// or 0 where it cannot be read.
func LoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// Busy runs n goroutines that spin on n OS threads until stop is called:
// a CPU load to measure a system under (the caller runs it in a process
// of its own, at nice 0, so the load competes with the systems under test
// through the kernel's scheduler, not Go's).
func Busy(n int) (stop func()) {
	var quit atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			x := uint64(1)
			for !quit.Load() {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			busySink.Store(x)
		}()
	}
	return func() { quit.Store(true); wg.Wait() }
}

var busySink atomic.Uint64
