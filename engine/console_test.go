package engine

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/console"
	"github.com/sluice-rtm/sluice/wire"
)

func httpGet(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	cl := &http.Client{Timeout: waitFor}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestConsoleConfigAndStatus: config.json names the WebSocket URL and
// whether a token is needed; the status API needs an accepted token, lists
// the node with its load and the busiest channels first with their
// subscribers, and only the channels the token's role may subscribe to.
func TestConsoleConfigAndStatus(t *testing.T) {
	s := startTest(t, func(o *Options) {
		o.WSListen = "127.0.0.1:0"
		o.MetricsListen = "127.0.0.1:0"
		o.ServerName = "console-node"
		o.Auth = testAuth()
	})
	base := "http://" + s.MetricsAddr() + "/console/"
	code, body := httpGet(t, base+"config.json", "")
	var cfg console.Config
	if err := json.Unmarshal(body, &cfg); code != 200 || err != nil || cfg.WS == nil ||
		*cfg.WS != "ws://"+s.WSAddr()+"/" || !cfg.Auth || cfg.Node != "console-node" {
		t.Fatalf("config.json: %d %s", code, body)
	}
	if code, _ := httpGet(t, base+"api/status", ""); code != 401 {
		t.Fatalf("status without a token: %d", code)
	}
	if code, _ := httpGet(t, base+"api/status", "not-a-token-of-this-server"); code != 401 {
		t.Fatalf("status with a refused token: %d", code)
	}
	alice := login(t, s.Addr(), tokAlice)
	sub := login(t, s.Addr(), tokAlice)
	sub.subscribe(1, "chat.quiet", wire.StartLive, 0)
	sub.subscribe(2, "chat.busy", wire.StartLive, 0)
	// A first collection starts the measurement.
	httpGet(t, base+"api/status", tokAlice)
	var busy, quiet [][]byte
	for i := range 60 {
		busy = append(busy, payloadOf(i))
	}
	quiet = append(quiet, []byte("q"))
	if _, err := alice.publishBatch("chat.busy", busy); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.publishBatch("chat.quiet", quiet); err != nil {
		t.Fatal(err)
	}
	var st console.Status
	eventually(t, waitFor, "status shows chat.busy first", func() bool {
		code, body := httpGet(t, base+"api/status", tokAlice)
		if code != 200 || json.Unmarshal(body, &st) != nil {
			return false
		}
		return len(st.Channels) >= 2 && st.Channels[0].Name == "chat.busy" && st.Channels[0].MsgsPerSec > 0
	})
	if st.Node != "console-node" || len(st.Members) != 1 || st.Members[0].Name != "console-node" ||
		st.Members[0].State != "alive" || st.Members[0].Load.Connections < 2 || st.Members[0].Load.Streamlets < 1 {
		t.Fatalf("members %+v", st.Members)
	}
	if st.Channels[0].Subscribers != 1 || st.Channels[1].Name != "chat.quiet" || st.Channels[1].Subscribers != 1 {
		t.Fatalf("channels %+v", st.Channels)
	}
	// bob's role subscribes to metrics.> only: the chat channels are not
	// his to see.
	bob := login(t, s.Addr(), tokBob)
	bob.subscribe(1, "metrics.cpu", wire.StartLive, 0)
	eventually(t, waitFor, "bob's status shows metrics.cpu", func() bool {
		code, body := httpGet(t, base+"api/status", tokBob)
		if code != 200 || json.Unmarshal(body, &st) != nil {
			return false
		}
		for _, c := range st.Channels {
			if !strings.HasPrefix(c.Name, "metrics.") {
				t.Fatalf("bob sees %q", c.Name)
			}
		}
		return len(st.Channels) == 1
	})
	// The page itself is served from the embedded files.
	if code, body := httpGet(t, base+"health.txt", ""); code != 200 || strings.TrimSpace(string(body)) != "ok" {
		t.Fatalf("health.txt: %d %q", code, body)
	}
}

// TestConsoleWithoutAuthOrWS: no auth, no WebSocket listener.
func TestConsoleWithoutAuthOrWS(t *testing.T) {
	s := startTest(t, func(o *Options) { o.MetricsListen = "127.0.0.1:0" })
	code, body := httpGet(t, "http://"+s.MetricsAddr()+"/console/config.json", "")
	if code != 200 || !strings.Contains(string(body), `"ws":null`) || !strings.Contains(string(body), `"auth":false`) {
		t.Fatalf("config.json: %d %s", code, body)
	}
	if code, _ := httpGet(t, "http://"+s.MetricsAddr()+"/console/api/status", ""); code != 200 {
		t.Fatalf("status without auth: %d", code)
	}
}

// TestConsoleCountsSurviveIdleSweep: a loop that forgets an idle channel
// view (no subscriber on that loop, idle for a second) keeps the view
// while a console polls and its counts are not collected yet, so the
// rate covers every publish. The clock is the test's: the rate is exact.
func TestConsoleCountsSurviveIdleSweep(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := startTest(t, func(o *Options) { o.now = clock })
	src := s.consoleSource()
	if _, err := src.Status(context.Background()); err != nil { // starts the measurement
		t.Fatal(err)
	}
	pub, _ := helloRaw(t, s.Addr())
	batch := make([][]byte, 40)
	for i := range batch {
		batch[i] = []byte("0123456789")
	}
	if _, err := pub.publishBatch("idle.view", batch); err != nil {
		t.Fatal(err)
	}
	advance(2 * time.Second)
	onLoops(t, s, func(l *loop) { l.sweep() }) // the view is idle, no subscriber: it would be forgotten
	st, err := src.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Channels) != 1 || st.Channels[0].Name != "idle.view" || st.Channels[0].MsgsPerSec != 20 || st.Channels[0].BytesPerSec != 200 {
		t.Fatalf("channels %+v, want idle.view at 20 msg/s, 200 B/s", st.Channels)
	}
	if m := st.Members[0].Load; m.MsgsInPerSec != 20 || m.BytesInPerSec != 200 {
		t.Fatalf("node load %+v", m)
	}
	// Collected: the next idle sweep forgets the view.
	advance(2 * time.Second)
	onLoops(t, s, func(l *loop) { l.sweep() })
	onLoops(t, s, func(l *loop) {
		if l.chans["idle.view"] != nil {
			t.Errorf("loop %d still holds the collected, idle view", l.idx)
		}
	})
}
