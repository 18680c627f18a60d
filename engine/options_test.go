package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
)

func TestOptions_DefaultsAreValid(t *testing.T) {
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.LimitMsgs != 5000 || o.LimitSize != 2<<20 || o.LimitLife != 4*time.Second ||
		o.TTL != 60*time.Second || o.MaxPayload != 1<<20 {
		t.Fatalf("defaults differ from BRIEF.md: %+v", o)
	}
}

func TestOptions_ValidateNamesTheField(t *testing.T) {
	cases := []struct {
		field  string
		mutate func(*Options)
	}{
		{"Listen", func(o *Options) { o.Listen = "no-port" }},
		{"Loops", func(o *Options) { o.Loops = -1 }},
		{"Loops", func(o *Options) { o.Loops = 1025 }},
		{"ServerName", func(o *Options) { o.ServerName = strings.Repeat("x", 256) }},
		{"MaxConns", func(o *Options) { o.MaxConns = 0 }},
		{"MaxSubsPerConn", func(o *Options) { o.MaxSubsPerConn = 0 }},
		{"MaxSubsPerConn", func(o *Options) { o.MaxSubsPerConn = 65536 }},
		{"MaxPayload", func(o *Options) { o.MaxPayload = 0 }},
		{"MaxPayload", func(o *Options) { o.MaxPayload = 64<<20 + 1 }},
		{"OutboundLimit", func(o *Options) { o.OutboundLimit = 64<<10 - 1 }},
		{"MaxRetained", func(o *Options) { o.MaxRetained = -1 }},
		{"SlowPolicy", func(o *Options) { o.SlowPolicy = "drop" }},
		{"PingInterval", func(o *Options) { o.PingInterval = -time.Second }},
		{"HandshakeTimeout", func(o *Options) { o.HandshakeTimeout = 0 }},
		{"LimitMsgs", func(o *Options) { o.LimitMsgs = 0 }},
		{"LimitMsgs", func(o *Options) { o.LimitMsgs = 1<<24 + 1 }},
		{"LimitSize", func(o *Options) { o.LimitSize = o.MaxPayload + 3 }},
		{"LimitSize", func(o *Options) { o.LimitSize = 1<<30 + 1 }},
		{"LimitLife", func(o *Options) { o.LimitLife = time.Millisecond - 1 }},
		{"TTL", func(o *Options) { o.TTL = -1 }},
		{"Replicas", func(o *Options) { o.Replicas = 0 }},
		{"Replicas", func(o *Options) { o.Replicas = MaxReplicas + 1 }},
		{"ChannelRules[0].Replicas", func(o *Options) { o.ChannelRules = []ChannelRule{{Prefix: "a", Replicas: -1}} }},
		{"ChannelRules[0].Prefix", func(o *Options) { o.ChannelRules = []ChannelRule{{Prefix: ""}} }},
		{"ChannelRules[1].LimitMsgs", func(o *Options) {
			o.ChannelRules = []ChannelRule{{Prefix: "a", LimitMsgs: 3}, {Prefix: "b", LimitMsgs: -1}}
		}},
		{"ChannelRules[0].LimitSize", func(o *Options) { o.ChannelRules = []ChannelRule{{Prefix: "a", LimitSize: 100}} }},
		{"ChannelRules[0].LimitLife", func(o *Options) { o.ChannelRules = []ChannelRule{{Prefix: "a", LimitLife: time.Microsecond}} }},
		{"ChannelRules[0].TTL", func(o *Options) { o.ChannelRules = []ChannelRule{{Prefix: "a", TTL: -time.Second}} }},
	}
	for _, tc := range cases {
		o := DefaultOptions()
		tc.mutate(&o)
		err := o.Validate()
		if err == nil {
			t.Errorf("%s: invalid value accepted", tc.field)
			continue
		}
		if !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: error %v does not wrap ErrInvalidOptions", tc.field, err)
		}
		if !strings.Contains(err.Error(), ": "+tc.field+": ") {
			t.Errorf("error %q does not name field %s", err, tc.field)
		}
	}
	// Boundary values that are valid.
	o := DefaultOptions()
	o.Loops, o.MaxSubsPerConn, o.LimitSize, o.LimitLife, o.TTL = 1024, 65535, o.MaxPayload+4, time.Millisecond, 0
	o.OutboundLimit = 64 << 10
	o.ChannelRules = []ChannelRule{{Prefix: "x", LimitMsgs: 1}}
	if err := o.Validate(); err != nil {
		t.Fatalf("boundary values rejected: %v", err)
	}
}

func TestOptions_LimitsForLongestPrefix(t *testing.T) {
	o := DefaultOptions()
	o.ChannelRules = []ChannelRule{
		{Prefix: "a.b.", LimitMsgs: 20, TTL: 2 * time.Second},
		{Prefix: "a.", LimitMsgs: 10, LimitSize: 3 << 20, LimitLife: time.Second},
		{Prefix: "a.b.c", LimitSize: 4 << 20},
	}
	o.Replicas = 2
	o.ChannelRules = append(o.ChannelRules, ChannelRule{Prefix: "r.", Replicas: 3})
	server := role.Limits{Msgs: o.LimitMsgs, Size: o.LimitSize, Life: o.LimitLife, TTL: o.TTL, Replicas: 2}
	for _, tc := range []struct {
		name string
		want role.Limits
	}{
		{"other", server},
		{"a", server}, // shorter than every prefix
		{"a.x", role.Limits{Msgs: 10, Size: 3 << 20, Life: time.Second, TTL: o.TTL, Replicas: 2}},
		{"r.x", role.Limits{Msgs: o.LimitMsgs, Size: o.LimitSize, Life: o.LimitLife, TTL: o.TTL, Replicas: 3}},
		// The longest rule wins alone: its zero fields come from the
		// server, not from shorter matching rules.
		{"a.b.x", role.Limits{Msgs: 20, Size: o.LimitSize, Life: o.LimitLife, TTL: 2 * time.Second, Replicas: 2}},
		{"a.b.c.d", role.Limits{Msgs: o.LimitMsgs, Size: 4 << 20, Life: o.LimitLife, TTL: o.TTL, Replicas: 2}},
		{"b.a.", server},
	} {
		if got := o.limitsFor(tc.name); got != tc.want {
			t.Errorf("limitsFor(%q) = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
