package config

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestPresenceTable: the [presence] table sets Options.Presence; a bad
// value is an error naming its key; the example file's commented table
// parses when uncommented.
func TestPresenceTable(t *testing.T) {
	s := Default()
	doc := "[presence]\nmax-members = 500\nmax-bytes = \"8MiB\"\nevents-max = 50\noccupancy-interval = \"250ms\"\npublisher-window = \"30s\"\n"
	if err := Parse([]byte(doc), &s); err != nil {
		t.Fatal(err)
	}
	p := s.Options.Presence
	if p.MaxMembers != 500 || p.MaxBytes != 8<<20 || p.EventsMax != 50 || p.OccupancyInterval != 250*time.Millisecond || p.PublisherWindow != 30*time.Second {
		t.Fatalf("presence %+v", p)
	}
	for doc, key := range map[string]string{
		"[presence]\nevents-max = 0\n":                    "presence.events-max",
		"[presence]\nmax-members = 10\nevents-max = 11\n": "presence.events-max",
		"[presence]\noccupancy-interval = \"1ms\"\n":      "presence.occupancy-interval",
		"[presence]\nmax-bytes = \"10KiB\"\n":             "presence.max-bytes",
		"[presence]\nfoo = 1\n":                           "presence.foo",
	} {
		s := Default()
		err := Parse([]byte(doc), &s)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: %v, want an error naming %s", doc, err, key)
		}
	}
}

// TestExamplePresenceSection: the commented [presence] section of the
// example file, uncommented, gives the defaults.
func TestExamplePresenceSection(t *testing.T) {
	b, err := os.ReadFile("../sluice.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(b), "\n# [presence]\n")
	if !found {
		t.Fatal("no commented [presence] section in the example file")
	}
	section, _, _ = strings.Cut(section, "\n\n")
	var un strings.Builder
	un.WriteString("[presence]\n")
	for line := range strings.SplitSeq(section, "\n") {
		un.WriteString(strings.TrimPrefix(line, "# ") + "\n")
	}
	s := Default()
	if err := Parse([]byte(un.String()), &s); err != nil {
		t.Fatalf("uncommented [presence] section: %v", err)
	}
	if s.Options.Presence != Default().Options.Presence {
		t.Fatalf("the example's presence %+v is not the default %+v", s.Options.Presence, Default().Options.Presence)
	}
}
