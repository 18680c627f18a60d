// Command proxyconns measures how many WebSocket clients a Sluice server
// admits through a reverse proxy (issue 26: the per-address limit behind
// a proxy). It opens --conns WebSocket connections to --url (the proxy),
// each from one of --sources loopback source addresses in turn
// (127.0.0.2, 127.0.0.3, ...: distinct client addresses on one machine),
// sends HELLO on each and counts the WELCOMEs and the refusals, holding
// every connection open until all are counted.
//
//	go run ./bench/cmd/proxyconns --url ws://127.0.0.1:8088/ --conns 5000 --sources 200
//
// docs/operations.md ("Behind a proxy") has the setup (nginx in front of
// `sluice serve --ws-listen`) and the numbers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/client/wsdial"
	"github.com/sluice-rtm/sluice/wire"
)

func main() {
	url := flag.String("url", "ws://127.0.0.1:8088/", "WebSocket URL of the proxy in front of the server")
	conns := flag.Int("conns", 5000, "connections to open (each holds a file descriptor here)")
	sources := flag.Int("sources", 1, "loopback source addresses to spread them over (127.0.0.2 on), at most 250")
	parallel := flag.Int("parallel", 64, "connections being opened at once")
	timeout := flag.Duration("timeout", 30*time.Second, "bound on one connection's upgrade and HELLO")
	flag.Parse()
	if *sources < 1 || *sources > 250 || *conns < 1 || *parallel < 1 {
		fmt.Fprintln(os.Stderr, "proxyconns: --sources 1..250, --conns and --parallel positive")
		os.Exit(2)
	}
	var welcomed, refused, failed atomic.Int64
	var firstErr atomic.Value
	open := make([]net.Conn, *conns)
	sem := make(chan struct{}, *parallel)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range *conns {
		sem <- struct{}{}
		wg.Add(1)
		go func() { // ends with this connection's HELLO answer, bounded by timeout
			defer wg.Done()
			defer func() { <-sem }()
			src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%*sources))}
			ctx, cancel := context.WithTimeout(context.Background(), *timeout)
			defer cancel()
			c, ok, err := hello(ctx, *url, src)
			switch {
			case ok:
				welcomed.Add(1)
				open[i] = c
			case errors.Is(err, wsdial.ErrHandshake) || err == nil:
				refused.Add(1)
			default:
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for _, c := range open {
		if c != nil {
			c.Close()
		}
	}
	fmt.Printf("conns %d from %d source addresses: welcomed %d, refused %d, failed %d (%.1fs)\n",
		*conns, *sources, welcomed.Load(), refused.Load(), failed.Load(), took.Seconds())
	if e := firstErr.Load(); e != nil {
		fmt.Printf("first failure: %s\n", e)
	}
}

// hello upgrades a connection from src and sends HELLO; ok reports a
// WELCOME (the connection stays open), err a refusal of the upgrade
// (wsdial.ErrHandshake), an ERROR frame (nil error, not ok) or a failure.
func hello(ctx context.Context, url string, src *net.TCPAddr) (net.Conn, bool, error) {
	d := &net.Dialer{LocalAddr: src}
	c, err := wsdial.Dial(ctx, url, wsdial.Options{Dialer: d.DialContext})
	if err != nil {
		return nil, false, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "proxyconns"})); err != nil {
		c.Close()
		return nil, false, err
	}
	h, _, err := wire.NewReader(c, 1<<20).Next()
	if err != nil {
		c.Close()
		return nil, false, err
	}
	_ = c.SetDeadline(time.Time{})
	if h.Type != wire.TypeWelcome {
		c.Close()
		return nil, false, nil
	}
	return c, true, nil
}
