package main

import (
	"path/filepath"
	"reflect"
	"testing"
)

// TestParseServeWebSocketFlags: --ws-listen, --ws-origins, --http-listen
// and the old --metrics-listen, and their config keys.
func TestParseServeWebSocketFlags(t *testing.T) {
	fs := newFlagSet("serve", "", "")
	cfg, _, err := parseServe(fs, []string{"--ws-listen", "127.0.0.1:7401", "--ws-origins", "https://a.example, https://b.example",
		"--http-listen", "127.0.0.1:7480"})
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.opts
	if o.WSListen != "127.0.0.1:7401" || !reflect.DeepEqual(o.WSOrigins, []string{"https://a.example", "https://b.example"}) ||
		o.MetricsListen != "127.0.0.1:7480" {
		t.Fatalf("options: %q %q %q", o.WSListen, o.WSOrigins, o.MetricsListen)
	}
	fs = newFlagSet("serve", "", "")
	if cfg, _, err = parseServe(fs, []string{"--metrics-listen", "127.0.0.1:7481"}); err != nil || cfg.opts.MetricsListen != "127.0.0.1:7481" {
		t.Fatalf("--metrics-listen: %v %q", err, cfg.opts.MetricsListen)
	}
	path := filepath.Join(t.TempDir(), "s.toml")
	writeFile(t, path, "ws-listen = \"127.0.0.1:7402\"\nws-origins = [\"*\"]\nhttp-listen = \"127.0.0.1:7482\"\n")
	fs = newFlagSet("serve", "", "")
	if cfg, _, err = parseServe(fs, []string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	if o := cfg.opts; o.WSListen != "127.0.0.1:7402" || !reflect.DeepEqual(o.WSOrigins, []string{"*"}) || o.MetricsListen != "127.0.0.1:7482" {
		t.Fatalf("config: %q %q %q", o.WSListen, o.WSOrigins, o.MetricsListen)
	}
	fs = newFlagSet("serve", "", "")
	if _, _, err = parseServe(fs, []string{"--ws-listen", "127.0.0.1:0", "--ws-origins", "app.example.com"}); err == nil {
		t.Fatal("an origin without a scheme was accepted")
	}
}
