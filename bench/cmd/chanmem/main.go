// Command chanmem measures the memory of many small channels on a real
// `sluice serve` process (issue 14): it starts the server as a child,
// publishes one small acknowledged message to each of N channels, and
// samples the child's RSS (VmRSS of /proc/PID/status) and the server's
// sluice_node_retained_bytes: fresh, after publishing, and every few
// seconds until the history has expired and for a while after.
//
// With --flood it measures peak RSS against --max-retained instead,
// optionally with subscribers that never read and idle connections
// (slow.go).
//
//	go build -o /tmp/sluice ./cmd/sluice
//	go run ./bench/cmd/chanmem --sluice /tmp/sluice --channels 100000
//	go run ./bench/cmd/chanmem --sluice /tmp/sluice --size 1024 --flood 2000000000 \
//		--slow-subs 50 --idle-conns 2950 --args "--max-retained 64MiB --max-conns-per-addr 4000"
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rtm/sluice/client"
)

func main() {
	bin := flag.String("sluice", "sluice", "the sluice binary")
	n := flag.Int("channels", 100_000, "channels, one message each")
	size := flag.Int("size", 1, "payload bytes")
	ttl := flag.Duration("ttl", 20*time.Second, "--ttl of the server")
	life := flag.Duration("life", time.Second, "--limit-life of the server")
	after := flag.Duration("after", 2*time.Minute, "how long to sample after the history expired")
	conns := flag.Int("conns", 8, "publishing connections")
	extra := flag.String("args", "", "more serve arguments, space separated")
	floodBytes := flag.Int64("flood", 0, "instead: publish this many payload bytes of --size messages over 16 channels as fast as acks allow and report the peak RSS (with --args \"--max-retained 64MiB\")")
	slowSubs := flag.Int("slow-subs", 0, "with --flood: this many subscribers of every flood channel that never read")
	idleConns := flag.Int("idle-conns", 0, "with --flood: this many more connections that only say HELLO (pass --max-conns-per-addr in --args past 1,024)")
	flag.Parse()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	addr := ln.Addr().String()
	ln.Close()
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	metricsAddr := mln.Addr().String()
	mln.Close()
	args := []string{"serve", "--listen", addr, "--ttl", ttl.String(), "--limit-life", life.String(), "--log-level", "warn", "--http-listen", metricsAddr}
	if *extra != "" {
		args = append(args, strings.Fields(*extra)...)
	}
	cmd := exec.Command(*bin, args...)
	cmd.Stderr = os.Stderr
	must(cmd.Start())
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	ctx := context.Background()
	var c0 *client.Conn
	for i := 0; i < 100; i++ {
		if c0, err = client.Dial(ctx, addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling for the child to listen
	}
	must(err)
	start := time.Now()
	report := func(what string) {
		fmt.Printf("%7.1fs  %-28s rss %7.1f MiB\n", time.Since(start).Seconds(), what, float64(rss(pid))/(1<<20))
	}
	report("fresh")
	fresh := rss(pid)
	payload := make([]byte, *size)
	if *floodBytes > 0 {
		flood(addr, metricsAddr, pid, int(*floodBytes/int64(*size)), *conns, payload, fresh, *slowSubs, *idleConns)
		return
	}
	var wg sync.WaitGroup
	for k := 0; k < *conns; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Dial(ctx, addr)
			must(err)
			defer c.Close()
			var acks []*client.PubAck
			for i := k; i < *n; i += *conns {
				a, err := c.PublishAsync(ctx, fmt.Sprintf("mem.%d", i), payload)
				must(err)
				acks = append(acks, a)
				if len(acks) == 1000 {
					waitAll(acks)
					acks = acks[:0]
				}
			}
			waitAll(acks)
		}()
	}
	wg.Wait()
	published := time.Now()
	report(fmt.Sprintf("published %d", *n))
	peak := rss(pid)
	fmt.Printf("per channel right after publishing: %.0f B of RSS over fresh\n", float64(peak-fresh)/float64(*n))
	expiry := published.Add(*life + *ttl)
	var held int64 // the last RSS sampled while the history was retained
	for time.Until(expiry.Add(*after)) > 0 {
		time.Sleep(5 * time.Second) // sampling interval
		r := rss(pid)
		peak = max(peak, r)
		state := "history retained"
		if time.Now().After(expiry) {
			state = fmt.Sprintf("%.0fs after expiry", time.Since(expiry).Seconds())
		} else {
			held = r
		}
		report(state)
	}
	if held > 0 {
		fmt.Printf("per channel while retained (idle server, last sample before expiry): %.0f B of RSS over fresh\n", float64(held-fresh)/float64(*n))
	}
	fmt.Printf("peak %.1f MiB, fresh %.1f MiB, end %.1f MiB\n", float64(peak)/(1<<20), float64(fresh)/(1<<20), float64(rss(pid))/(1<<20))
	c0.Close()
}

func waitAll(acks []*client.PubAck) {
	for _, a := range acks {
		<-a.Done()
		must(a.Err())
	}
}

func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	must(err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "chanmem:", err)
		os.Exit(1)
	}
}
