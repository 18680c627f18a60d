package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/console"
)

type fakeSource struct {
	ws     string
	tls    bool
	auth   bool
	tokens map[string]string // token -> visible channel prefix
	st     console.Status
}

func (f *fakeSource) Node() string                                   { return "n1" }
func (f *fakeSource) WSAddr() (string, bool)                         { return f.ws, f.tls }
func (f *fakeSource) AuthRequired() bool                             { return f.auth }
func (f *fakeSource) Status(context.Context) (console.Status, error) { return f.st, nil }
func (f *fakeSource) Authorize(tok []byte, has bool) (func(string) bool, error) {
	if !f.auth {
		return nil, nil
	}
	prefix, ok := f.tokens[string(tok)]
	if !has || !ok {
		return nil, console.ErrUnauthorized
	}
	return func(ch string) bool { return strings.HasPrefix(ch, prefix) }, nil
}

func get(t *testing.T, srv *httptest.Server, path, token string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestConfigJSON(t *testing.T) {
	cases := []struct {
		ws   string
		tls  bool
		auth bool
		want string
	}{
		{"127.0.0.1:7401", false, false, `{"ws":"ws://127.0.0.1:7401/","auth":false,"node":"n1"}`},
		{"127.0.0.1:7401", true, true, `{"ws":"wss://127.0.0.1:7401/","auth":true,"node":"n1"}`},
		{"", false, false, `{"ws":null,"auth":false,"node":"n1"}`},
		// An unspecified address is reached at the host the browser used.
		{"0.0.0.0:7401", false, false, `{"ws":"ws://127.0.0.1:7401/","auth":false,"node":"n1"}`},
		{"[::]:7401", false, false, `{"ws":"ws://127.0.0.1:7401/","auth":false,"node":"n1"}`},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(console.Handler(&fakeSource{ws: tc.ws, tls: tc.tls, auth: tc.auth}))
		code, h, body := get(t, srv, "/console/config.json", "")
		srv.Close()
		if code != 200 || h.Get("Content-Type") != "application/json" || strings.TrimSpace(body) != tc.want {
			t.Errorf("ws %q: %d %q, want %s", tc.ws, code, body, tc.want)
		}
	}
}

func TestStatusBusiestFirstAndAuth(t *testing.T) {
	src := &fakeSource{auth: true, tokens: map[string]string{"all": "", "chat": "chat."}}
	src.st.Node = "n1"
	src.st.Members = []console.Member{{Name: "n1", Addr: "127.0.0.1:7400", State: "alive", Load: console.Load{Streamlets: 3}}}
	for i := range 30 {
		src.st.Channels = append(src.st.Channels, console.Channel{Name: fmt.Sprintf("ch.%02d", i), MsgsPerSec: float64(i % 25), Subscribers: int64(i)})
	}
	src.st.Channels = append(src.st.Channels, console.Channel{Name: "chat.eu", MsgsPerSec: 1})
	srv := httptest.NewServer(console.Handler(src))
	defer srv.Close()

	for _, tok := range []string{"", "wrong"} {
		code, h, _ := get(t, srv, "/console/api/status", tok)
		if code != 401 || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("token %q: %d %v", tok, code, h)
		}
	}
	code, _, body := get(t, srv, "/console/api/status", "all")
	var st console.Status
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("%d %v %s", code, err, body)
	}
	if len(st.Channels) != console.MaxChannels || st.Channels[0].Name != "ch.24" || st.Channels[1].Name != "ch.23" {
		t.Fatalf("channels %v", st.Channels)
	}
	for i := 1; i < len(st.Channels); i++ {
		if st.Channels[i].MsgsPerSec > st.Channels[i-1].MsgsPerSec {
			t.Fatalf("not busiest first: %v", st.Channels)
		}
	}
	if len(st.Members) != 1 || st.Members[0].Load.Streamlets != 3 {
		t.Fatalf("members %v", st.Members)
	}
	// A role sees only the channels it may subscribe to.
	_, _, body = get(t, srv, "/console/api/status", "chat")
	if err := json.Unmarshal([]byte(body), &st); err != nil || len(st.Channels) != 1 || st.Channels[0].Name != "chat.eu" {
		t.Fatalf("chat token: %s", body)
	}
	// The field names of the contract.
	for _, k := range []string{`"members":`, `"load":{"streamlets":`, `"channels":`, `"msgsInPerSec":`, `"bytesInPerSec":`, `"connections":`} {
		if _, _, b := get(t, srv, "/console/api/status", "all"); !strings.Contains(b, k) {
			t.Errorf("status JSON lacks %s: %s", k, b)
		}
	}
}

func TestStaticFiles(t *testing.T) {
	srv := httptest.NewServer(console.Handler(&fakeSource{}))
	defer srv.Close()
	if code, h, body := get(t, srv, "/console/health.txt", ""); code != 200 || strings.TrimSpace(body) != "ok" || h.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("health.txt: %d %q %v", code, body, h)
	}
	resp, err := srv.Client().Get(srv.URL + "/console")
	if err != nil || resp.Request.URL.Path != "/console/" {
		t.Fatalf("/console redirect: %v %v", err, resp)
	}
	resp.Body.Close()
	if code, _, _ := get(t, srv, "/console/nope.js", ""); code != 404 {
		t.Fatalf("missing file: %d", code)
	}
}
