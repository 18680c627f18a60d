package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-rtm/sluice/client"
	"github.com/sluice-rtm/sluice/wire"
)

// The --flood mode with --slow-subs and --idle-conns: issue 14's peak RSS
// against --max-retained with subscribers that never read and thousands
// of connections. Each slow subscriber is a raw socket with a 4 KiB
// receive buffer that sends HELLO and one SUBSCRIBE (live) per flood
// channel and then never reads again (a PING every 10 s keeps it clear of
// the idle timeout), so its output backs up in the server and the
// slow-consumer policy applies; each idle connection sends HELLO and then
// only PINGs. While the flood runs, the server's RSS and its
// sluice_node_memory_bytes parts are sampled every 100 ms.

// floodChannels is how many channels the flood spreads over.
const floodChannels = 16

// rawConns opens n raw connections that never read: with subscribe set,
// each subscribes to every flood channel first. It returns them open;
// stop closes them.
func rawConns(addr string, n int, subscribe bool) (stop func()) {
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	done := make(chan struct{})
	var wg sync.WaitGroup
	conns := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := d.Dial("tcp", addr)
		must(err)
		b := wire.AppendHello(nil, 1, wire.Hello{MinVersion: wire.Version1, MaxVersion: wire.Version1, Name: "chanmem"})
		if subscribe {
			for ch := 0; ch < floodChannels; ch++ {
				b = wire.AppendSubscribe(b, uint32(2+ch), wire.Subscribe{SubID: uint32(1 + ch), Start: wire.StartLive, Channel: []byte(fmt.Sprintf("flood.%d", ch))})
			}
		}
		_, err = c.Write(b)
		must(err)
		conns = append(conns, c)
	}
	wg.Add(1)
	go func() { // PINGs, so that the idle timeout closes none of them
		defer wg.Done()
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		ping := wire.AppendPing(nil, 1)
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			for _, c := range conns {
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = c.Write(ping)
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	}
}

// memParts reads sluice_node_memory_bytes{part=...} from the metrics page.
func memParts(metricsAddr string) map[string]float64 {
	parts := map[string]float64{}
	if metricsAddr == "" {
		return parts
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return parts
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, `sluice_node_memory_bytes{part="`)
		if !ok {
			continue
		}
		name, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			parts[name] = v
		}
	}
	return parts
}

// flood publishes n messages of payload over floodChannels channels from
// conns connections, acknowledged, 1,000 in flight per connection, while
// sampling the server's RSS and memory parts; it prints the peak.
func flood(addr, metricsAddr string, pid int, n, conns int, payload []byte, fresh int64, slowSubs, idleConns int) {
	ctx := context.Background()
	start := time.Now()
	var stopRaw []func()
	if idleConns > 0 {
		stopRaw = append(stopRaw, rawConns(addr, idleConns, false))
	}
	if slowSubs > 0 {
		stopRaw = append(stopRaw, rawConns(addr, slowSubs, true))
	}
	fmt.Printf("%d idle connections and %d subscribers that never read (x %d channels) open after %v; rss %.1f MiB\n",
		idleConns, slowSubs, floodChannels, time.Since(start).Round(time.Millisecond), float64(rss(pid))/(1<<20))
	var (
		mu        sync.Mutex
		peak      int64
		peakParts map[string]float64
		maxOut    float64
	)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(100 * time.Millisecond) // RSS sampling
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			r := rss(pid)
			parts := memParts(metricsAddr)
			mu.Lock()
			if r > peak {
				peak, peakParts = r, parts
			}
			maxOut = max(maxOut, parts["outbound"])
			mu.Unlock()
		}
	}()
	var published atomic.Int64
	var wg sync.WaitGroup
	for k := 0; k < conns; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Dial(ctx, addr)
			must(err)
			defer c.Close()
			var acks []*client.PubAck
			for i := k; i < n; i += conns {
				a, err := c.PublishAsync(ctx, fmt.Sprintf("flood.%d", i%floodChannels), payload)
				must(err)
				if acks = append(acks, a); len(acks) == 1000 {
					waitAll(acks)
					published.Add(int64(len(acks)))
					acks = acks[:0]
				}
			}
			waitAll(acks)
			published.Add(int64(len(acks)))
		}()
	}
	wg.Wait()
	took := time.Since(start)
	time.Sleep(time.Second) // one more second of samples: output still draining into full sockets
	close(stop)
	<-sampled
	mib := func(v float64) string { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }
	fmt.Printf("flood: %d x %d B to %d channels in %v\n", published.Load(), len(payload), floodChannels, took.Round(time.Millisecond))
	fmt.Printf("peak RSS %s (fresh %s, now %s); at the peak: history %s, outbound %s, heap %s; largest outbound seen %s\n",
		mib(float64(peak)), mib(float64(fresh)), mib(float64(rss(pid))),
		mib(peakParts["history"]), mib(peakParts["outbound"]), mib(peakParts["heap"]), mib(maxOut))
	for _, s := range stopRaw {
		s()
	}
}
