package fuzz

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client/wsdial"
	"github.com/sluice-rtm/sluice/engine"
	"github.com/sluice-rtm/sluice/wire"
	"github.com/sluice-rtm/sluice/ws"
)

var (
	wsOnce   sync.Once
	wsSrv    *engine.Server
	wsSrvErr error
)

// wsServer returns the WebSocket URL of this process's server with a
// WebSocket listener (the shared options plus --ws-listen), started on
// first use and shut down by TestMain.
func wsServer(tb testing.TB) *engine.Server {
	tb.Helper()
	wsOnce.Do(func() {
		o := fuzzOptions()
		o.WSListen = "127.0.0.1:0"
		if wsSrv, wsSrvErr = engine.Start(o); wsSrvErr == nil {
			wsSrvErr = errors.Join(wsProbe(wsSrv.WSURL()), warmUp(wsSrv.Addr()))
		}
	})
	if wsSrvErr != nil {
		tb.Fatalf("engine: %v", wsSrvErr)
	}
	return wsSrv
}

// wsProbe is probe over the WebSocket gateway: the Go SDK's byte stream
// through client/wsdial, so every frame is one message.
func wsProbe(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), syncTimeout)
	defer cancel()
	c, err := wsdial.Dial(ctx, url, wsdial.Options{})
	if err != nil {
		return fmt.Errorf("ws probe: %w", err)
	}
	return probeConn(c)
}

// FuzzServerWS drives a live server through its WebSocket listener: a
// valid upgrade, then (by the first cut byte) a HELLO, and then the
// fuzzer's bytes either raw, as the client's WebSocket byte stream, or as
// protocol bytes wrapped into masked binary messages cut (and fragmented)
// at fuzzer-chosen points, written in pieces. The server's answer must be
// well-formed WebSocket from a server (unmasked; each binary message
// exactly one protocol frame; nothing after a close frame), the
// connection must end once the client half-closes, a fresh TCP and a
// fresh WebSocket client must still be served, and no goroutine may leak
// nor the heap grow.
func FuzzServerWS(f *testing.F) {
	s := wsServer(f)
	hello := wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "fuzz"})
	pub := wire.AppendPublish(nil, 2, wire.FlagAck, "ws.fuzz", []byte("payload"))
	sub := wire.AppendSubscribe(nil, 3, wire.Subscribe{SubID: 1, Start: wire.StartEarliest, Channel: []byte("ws.fuzz")})
	f.Add(append(append([]byte(nil), pub...), sub...), []byte{3, 20, 30})                           // wrapped, one frame per message
	f.Add(append(append([]byte(nil), pub...), sub...), []byte{3, 40})                               // wrapped, two frames in a message
	f.Add(append(append([]byte(nil), hello...), pub...), []byte{2, 5, 200})                         // HELLO by the fuzzer, fragmented
	f.Add(ws.AppendMaskedFrame(nil, true, ws.OpText, []byte("hi"), [4]byte{1, 2, 3, 4}), []byte{1}) // raw text frame
	f.Add(ws.AppendFrame(nil, ws.OpBinary, pub), []byte{1})                                         // raw unmasked
	f.Add(ws.AppendHeader(nil, true, ws.OpBinary, 1<<30, &[4]byte{}), []byte{1})                    // raw oversize header
	f.Add([]byte{0x89, 0x80, 0, 0, 0, 0, 0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8}, []byte{1})            // raw ping, close
	f.Fuzz(func(t *testing.T, stream, cuts []byte) {
		heapBaseline()
		before := runtime.NumGoroutine()
		err := runWS(s.WSAddr(), stream, cuts)
		// +1: gnet enrolls each WebSocket connection from a worker of its
		// pool, which stays idle for up to 20 s before it is reaped.
		if err = errors.Join(err, probe(s.Addr()), wsProbe(s.WSURL()), settle(before+1), heapCheck()); err != nil {
			t.Fatal(err)
		}
	})
}

const wsUpgrade = "GET /fuzz HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"

func runWS(addr string, stream, cuts []byte) error {
	nc, err := net.DialTimeout("tcp", addr, syncTimeout)
	if err != nil {
		return fmt.Errorf("ws: dial: %w", err)
	}
	defer abort(nc)
	_ = nc.SetDeadline(time.Now().Add(syncTimeout))
	if _, err := io.WriteString(nc, wsUpgrade); err != nil {
		return fmt.Errorf("ws: write upgrade: %w", err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		return fmt.Errorf("ws: upgrade answer %v: %v", resp, err)
	}
	mode := byte(0)
	if len(cuts) > 0 {
		mode, cuts = cuts[0], cuts[1:]
	}
	key := [4]byte{0x5a, 0xa5, 0x3c, 0xc3}
	var out []byte
	if mode&1 == 0 {
		out = ws.AppendMaskedFrame(out, true, ws.OpBinary,
			wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "fuzz"}), key)
	}
	if mode&2 == 0 {
		out = append(out, stream...) // raw WebSocket bytes
	} else {
		// Protocol bytes in messages cut at the cut points; a cut byte
		// with its top bit set ends a fragment instead of a message.
		rest, op, k := stream, ws.OpBinary, 0
		for len(rest) > 0 {
			n := len(rest)
			fin := true
			if k < len(cuts) {
				n = min(n, int(cuts[k]&0x7f)+1)
				fin = cuts[k]&0x80 == 0
				k++
			}
			out = ws.AppendMaskedFrame(out, fin || n == len(rest), op, rest[:n], key)
			op = ws.OpContinuation
			if fin || n == len(rest) {
				op = ws.OpBinary
			}
			rest = rest[n:]
		}
	}
	done := make(chan error, 1)
	go func() { done <- checkWSAnswer(br) }()
	for off, i := 0, 0; off < len(out); i++ {
		n := len(out) - off
		if mode&2 == 0 && i < len(cuts) {
			n = min(n, int(cuts[i]%64)+1)
		}
		if _, err := nc.Write(out[off : off+n]); err != nil {
			break // the server may close early (it did not like the input)
		}
		off += n
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	return <-done
}

// checkWSAnswer reads the server's side until it ends and checks it.
func checkWSAnswer(br *bufio.Reader) error {
	rd := ws.Reader{Max: wire.HeaderLen + int(serverMaxBody), Client: true}
	oc := newOutCheck()
	var buf []byte
	closed := false
	for {
		chunk := make([]byte, 4096)
		n, err := br.Read(chunk)
		buf = append(buf, chunk[:n]...)
		for len(buf) > 0 {
			ev, m, derr := rd.Next(buf)
			if derr == ws.ErrIncomplete {
				break
			}
			if derr != nil {
				return fmt.Errorf("ws: the server sent bad WebSocket: %w", derr)
			}
			if closed {
				return fmt.Errorf("ws: a %v frame after the close frame", ev.Op)
			}
			switch ev.Op {
			case ws.OpBinary:
				h, body, k, serr := wire.Split(ev.Payload, serverMaxBody)
				if serr != nil || k != len(ev.Payload) {
					return fmt.Errorf("ws: a %d-byte message is not one frame (%d, %v)", len(ev.Payload), k, serr)
				}
				if ferr := oc.frame(h, body); ferr != nil {
					return ferr
				}
			case ws.OpClose:
				closed = true
			case ws.OpText:
				return errors.New("ws: the server sent a text message")
			}
			buf = buf[m:]
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
				return nil
			}
			return fmt.Errorf("ws: the connection did not end: %w", err)
		}
	}
}
