package bench

import (
	"context"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as a tiny TCP server when BENCH_TEST_SERVER is set, so
// the child-process server machinery can be tested with the test binary.
func TestMain(m *testing.M) {
	if addr := os.Getenv("BENCH_TEST_SERVER"); addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			os.Exit(3)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		<-sig
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startTestChild starts this test binary as a tiny TCP server child (see
// TestMain) with env added and pinned to cpus; it is stopped at cleanup.
func startTestChild(t *testing.T, env []string, cpus string) *ServerProc {
	t.Helper()
	addr, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("BENCH_TEST_SERVER", addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sp, err := StartServerProcEnv(ctx, []string{os.Args[0]}, env, addr, cpus, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Stop)
	return sp
}

func TestServerProcPinnedChild(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Fatalf("taskset (util-linux) is needed for --server-cpus: %v", err)
	}
	sp := startTestChild(t, nil, "0")
	st := sp.Stat()
	if st.Pid == os.Getpid() || st.Pid <= 0 {
		t.Fatalf("child pid %d", st.Pid)
	}
	if _, err := st.CPU(); err != nil {
		t.Fatal(err)
	}
	if rss, err := st.RSS(); err != nil || rss <= 0 {
		t.Fatalf("rss %d %v", rss, err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(st.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !containsLine(string(b), "Cpus_allowed_list:", "0") {
		t.Fatalf("child not pinned to cpu 0:\n%s", b)
	}
	select {
	case <-sp.Done():
		t.Fatal("Done closed while the child runs")
	default:
	}
	sp.Stop()
	<-sp.Done()
	sp.Stop() // idempotent
	if _, err := st.CPU(); err == nil {
		t.Fatal("stat of a stopped child still readable")
	}
}

// TestServerProcEnvReachesTheChildOnly: the entries given to
// StartServerProcEnv are in the child's environment and not in this
// process's.
func TestServerProcEnvReachesTheChildOnly(t *testing.T) {
	const kv = "BENCH_TEST_CHILD_ONLY=s3cret"
	sp := startTestChild(t, []string{kv}, "")
	b, err := os.ReadFile("/proc/" + strconv.Itoa(sp.Stat().Pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(string(b), "\x00")
	if !slices.Contains(env, kv) {
		t.Fatalf("child environment lacks %s", kv)
	}
	if !slices.Contains(env, "BENCH_TEST_SERVER="+sp.Addr) {
		t.Fatal("child environment lost the parent's entries")
	}
	if _, ok := os.LookupEnv("BENCH_TEST_CHILD_ONLY"); ok {
		t.Fatal("the child's entry was set in this process too")
	}
}

func TestServerProcExitsEarly(t *testing.T) {
	addr, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := StartServerProc(ctx, []string{"false"}, addr, "", nil); err == nil {
		t.Fatal("a server that exits at once was reported started")
	}
	if _, err := StartServerProc(ctx, nil, addr, "", nil); err == nil {
		t.Fatal("empty command accepted")
	}
}

func TestProcStatSelfCountsCPU(t *testing.T) {
	st := ProcStat{}
	a, err := st.CPU()
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := 0; i < 50_000_000; i++ {
		x += i ^ (x >> 3)
	}
	b, err := st.CPU()
	if err != nil || b <= a {
		t.Fatalf("cpu %v -> %v (%v), x=%d", a, b, err, x)
	}
	if rss, err := st.RSS(); err != nil || rss <= 0 {
		t.Fatalf("rss %d %v", rss, err)
	}
	// The same process read as a "child" through /proc: the precise
	// schedstat sum agrees with the 10 ms-resolution stat fields.
	byPid := ProcStat{Pid: os.Getpid()}
	sched, err1 := byPid.schedCPU()
	stat, err2 := byPid.statCPU()
	if err1 != nil || err2 != nil || sched <= 0 {
		t.Fatalf("schedstat %v (%v), stat %v (%v)", sched, err1, stat, err2)
	}
	if diff := (sched - stat).Abs(); diff > 50*time.Millisecond+stat/10 {
		t.Fatalf("schedstat %v vs stat %v", sched, stat)
	}
}

func TestPinSelf(t *testing.T) {
	before, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	allowed := lineValue(string(before), "Cpus_allowed_list:")
	defer func() {
		if err := PinSelf(allowed); err != nil {
			t.Error(err)
		}
	}()
	if err := PinSelf("0"); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile("/proc/self/status")
	if !containsLine(string(after), "Cpus_allowed_list:", "0") {
		t.Fatalf("not pinned: %s", lineValue(string(after), "Cpus_allowed_list:"))
	}
	if err := PinSelf("x"); err == nil {
		t.Fatal("bad list accepted")
	}
}

// lineValue returns the value of the "key" line of a /proc status file.
func lineValue(status, key string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func containsLine(status, key, want string) bool { return lineValue(status, key) == want }
