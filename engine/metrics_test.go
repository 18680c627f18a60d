package engine

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// scrape fetches url and parses the Prometheus text format into
// "name{labels}" -> value, checking that every sample's family was
// declared with HELP and TYPE first.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("content type %q", ct)
	}
	out := make(map[string]float64)
	typed := make(map[string]bool)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			if typ != "counter" && typ != "gauge" {
				t.Fatalf("bad type line %q", line)
			}
			typed[name] = true
			continue
		}
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		key := line[:i]
		name, _, _ := strings.Cut(key, "{")
		if !typed[name] {
			t.Fatalf("sample %q before its TYPE line", line)
		}
		if _, dup := out[key]; dup {
			t.Fatalf("sample %q repeated", key)
		}
		out[key] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMetricsScrapeAfterKnownTraffic(t *testing.T) {
	s := startTest(t, func(o *Options) {
		o.MetricsListen = "127.0.0.1:0"
		o.ServerName = "node-a"
		o.Auth = testAuth()
	})
	base := "http://" + s.MetricsAddr()
	sub1 := login(t, s.Addr(), tokAlice)
	sub2 := login(t, s.Addr(), tokAlice)
	pub := login(t, s.Addr(), tokAlice)
	sub1.subscribe(1, "chat.m", wire.StartLive, 0)
	sub2.subscribe(1, "chat.m", wire.StartLive, 0)
	payloads := make([][]byte, 10)
	for i := range payloads {
		payloads[i] = []byte(fmt.Sprintf("%0100d", i)) // 100 bytes each
	}
	if _, err := pub.publishBatch("chat.m", payloads); err != nil {
		t.Fatal(err)
	}
	sub1.events(10)
	sub2.events(10)
	// One forbidden publish and one refused HELLO.
	pub.write(wire.AppendPublish(nil, 500, wire.FlagAck, "secret", []byte("x")))
	h, body := pub.next()
	expectCode(t, h, body, wire.CodeForbidden, 500)
	c, h, body := helloToken(t, s.Addr(), "wrong")
	expectCode(t, h, body, wire.CodeUnauthenticated, 77)
	c.expectClosed()
	eventually(t, waitFor, "the refused connection to be cleaned up", func() bool {
		return s.conns.Load() == 3
	})

	m := scrape(t, base+"/metrics")
	want := map[string]float64{
		"sluice_connections":                                  3,
		"sluice_subscriptions":                                2,
		"sluice_connections_accepted_total":                   4,
		"sluice_messages_in_total":                            10,
		"sluice_message_bytes_in_total":                       1000,
		"sluice_messages_out_total":                           20,
		`sluice_auth_failures_total{kind="forbidden"}`:        1,
		`sluice_auth_failures_total{kind="unauthenticated"}`:  1,
		`sluice_errors_total{code="FORBIDDEN"}`:               1,
		`sluice_gaps_total{reason="slow"}`:                    0,
		`sluice_limit_violations_total{limit="publish_rate"}`: 0,
		`sluice_node_connections{node="node-a"}`:              3,
		`sluice_node_streamlets_hosted{node="node-a"}`:        1,
		"sluice_channels":                                     1,
		"sluice_grants_total":                                 1,
		`sluice_slow_consumer_actions_total{action="skip"}`:   0,
		`sluice_slow_consumer_actions_total{action="lag"}`:    0,
		"sluice_retention_expired_total":                      0,
	}
	for k, v := range want {
		got, ok := m[k]
		if !ok {
			t.Errorf("%s missing", k)
		} else if got != v {
			t.Errorf("%s = %v, want %v", k, got, v)
		}
	}
	// The retained history is measured at each tick: 1000 payload bytes
	// take at least that much, far below the budget.
	s.retentionSweep()
	if r := scrape(t, base+"/metrics")[`sluice_node_retained_bytes{node="node-a"}`]; r < 1000 || r > 1<<20 {
		t.Errorf("retained bytes %v, want the footprint of 10 x 100 B", r)
	}
	// Bytes: at least the frames and payloads that went each way.
	if in := m["sluice_received_bytes_total"]; in < 10*(wire.HeaderLen+1+6+100) {
		t.Errorf("received bytes %v too small", in)
	}
	if out := m["sluice_sent_bytes_total"]; out < 2*10*(4+100) {
		t.Errorf("sent bytes %v too small", out)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s %q", path, resp.Status, b)
		}
	}
}

func TestReadyzDuringShutdown(t *testing.T) {
	s := startTest(t, nil)
	h := s.Handler()
	get := func(path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	if get("/readyz") != 200 || get("/healthz") != 200 {
		t.Fatal("not ready after Start")
	}
	s.shutting.Store(true) // what Shutdown sets first
	if get("/readyz") != http.StatusServiceUnavailable || get("/healthz") != 200 {
		t.Fatal("readyz must fail and healthz pass while shutting down")
	}
	s.shutting.Store(false)
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if get("/healthz") != http.StatusServiceUnavailable {
		t.Fatal("healthz passes after the server stopped")
	}
}

func TestWriteMetricsEscapesLabels(t *testing.T) {
	var b strings.Builder
	m := Metrics{Node: "a\"b\\c\nd", Rejected: map[string]int64{}, Errors: map[string]int64{},
		Gaps: map[string]int64{}, Violations: map[string]int64{}}
	if err := WriteMetrics(&b, m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `sluice_node_connections{node="a\"b\\c\nd"} 0`) {
		t.Fatalf("label not escaped:\n%s", b.String())
	}
}
