package main

import (
	"strings"
	"testing"
	"time"
)

// TestParseServePresenceFlags: the --presence-* flags set the presence
// options; a bad value names the configuration key.
func TestParseServePresenceFlags(t *testing.T) {
	fs := newFlagSet("serve", "", "")
	cfg, _, err := parseServe(fs, []string{"--presence-max-members", "300", "--presence-max-bytes", "2MiB",
		"--presence-events-max", "20", "--presence-occupancy-interval", "100ms", "--presence-publisher-window", "5s"})
	p := cfg.opts.Presence
	if err != nil || p.MaxMembers != 300 || p.MaxBytes != 2<<20 || p.EventsMax != 20 ||
		p.OccupancyInterval != 100*time.Millisecond || p.PublisherWindow != 5*time.Second {
		t.Fatalf("%+v %v", p, err)
	}
	fs = newFlagSet("serve", "", "")
	if _, _, err := parseServe(fs, []string{"--presence-events-max", "0"}); err == nil || !strings.Contains(err.Error(), "presence.events-max") {
		t.Fatalf("events max 0: %v", err)
	}
}
