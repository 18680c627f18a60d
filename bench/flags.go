package bench

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// QuickSuite is the set of scenario specs (see ParseSpec) that --quick
// comparisons run when no scenario is named: the shapes of issue 16, each
// at its full count (CountFor). The comparison tool adds the raw byte
// relay baseline (bench/peer).
var QuickSuite = []string{
	"pub/size=16",
	"pubsub/size=128",
	"pubsub/size=1024",
	"pubsub/size=16384",
	"nm/size=128,pubs=4,subs=4,channels=1",
	"fanout/size=128,subs=100",
	"nm/size=128,pubs=1,subs=10000,channels=10000",
	"latency/size=128,rate=50000",
	"latency/size=128,rate=50000,busy=true",
}

// FullSuite is every scenario at every standard size and shape; a full run
// takes tens of minutes.
var FullSuite = func() []string {
	s := append([]string(nil), QuickSuite...)
	for _, size := range Sizes {
		s = append(s, fmt.Sprintf("pub/size=%d", size))
	}
	s = append(s, "pubsub/size=16", "fanout/size=128,subs=10", "fanout/size=128,subs=1000",
		"nm/size=128,pubs=4,subs=4,channels=64",
		"ack-sync/size=128", "ack-async/size=128", "ack-async/size=1024",
		"latency/size=1024,rate=10000",
		"replay/size=128,count=1000000", "idle/conns=10000")
	return s
}()

// AddFlags registers the workload flags on fs, writing into c; quick
// receives --quick. Call it before fs.Parse; then apply the values with
// ParseSpec for each scenario.
func AddFlags(fs *flag.FlagSet, c *Config, quick *bool) {
	fs.IntVar(&c.Size, "size", 0, "message payload `BYTES` (default 128; the suite uses 16, 128, 1024, 16384)")
	fs.IntVar(&c.Count, "count", 0, "messages per publisher, or retained messages for replay, `N` (default by size: 1000000 up to 128 B, 500000 up to 1 KiB, 60000 above)")
	fs.IntVar(&c.Pubs, "pubs", 0, "publisher connections, `N` (default per scenario)")
	fs.IntVar(&c.Subs, "subs", 0, "subscriber connections, `N` (fanout default 10)")
	fs.IntVar(&c.Channels, "channels", 0, "channels, `N` (nm default 64)")
	fs.Float64Var(&c.Rate, "rate", 0, "latency: messages per second, `R` (default 50000)")
	fs.DurationVar(&c.Duration, "duration", 0, "latency: how long to publish; others: cap on the publishing phase, `DUR` (default 10s / 2m)")
	fs.IntVar(&c.Window, "window", 0, "ack-async and replay fill: publishes in flight, `N` (default 1000)")
	fs.IntVar(&c.Conns, "conns", 0, "idle: connections, `N` (default 10000; --quick 1000)")
	fs.Func("pacer", "latency: how the publisher waits for its next due time, `sleep` (default: nanosleep on a locked thread), spin or yield (see PacerMode)", func(v string) error {
		m, err := ParsePacerMode(v)
		c.Pacer = m
		return err
	})
	fs.DurationVar(&c.Stall, "stall", 0, "give up waiting for deliveries after no progress for `DUR` (default 3s)")
	fs.BoolVar(quick, "quick", false, "small counts and durations: a run of a few seconds per scenario")
}

// ParseSpec parses a scenario spec "NAME[/key=value,...]" (keys: size,
// count, pubs, subs, channels, rate, duration, window, conns, pacer, busy) over base,
// and returns the scenario name and its configuration. Values in the spec
// win over base.
func ParseSpec(spec string, base Config) (string, Config, error) {
	name, opts, _ := strings.Cut(spec, "/")
	if _, err := Lookup(name); err != nil {
		return "", base, err
	}
	c := base
	if opts == "" {
		return name, c, nil
	}
	for _, kv := range strings.Split(opts, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return "", base, fmt.Errorf("%w: %q in %q is not key=value", ErrConfig, kv, spec)
		}
		var err error
		switch k {
		case "size":
			c.Size, err = strconv.Atoi(v)
		case "count":
			c.Count, err = strconv.Atoi(v)
		case "pubs":
			c.Pubs, err = strconv.Atoi(v)
		case "subs":
			c.Subs, err = strconv.Atoi(v)
		case "channels":
			c.Channels, err = strconv.Atoi(v)
		case "window":
			c.Window, err = strconv.Atoi(v)
		case "conns":
			c.Conns, err = strconv.Atoi(v)
		case "rate":
			c.Rate, err = strconv.ParseFloat(v, 64)
		case "duration":
			c.Duration, err = time.ParseDuration(v)
		case "pacer":
			c.Pacer, err = ParsePacerMode(v)
		case "busy":
			c.Busy, err = strconv.ParseBool(v)
		default:
			return "", base, fmt.Errorf("%w: unknown key %q in %q", ErrConfig, k, spec)
		}
		if err != nil {
			return "", base, fmt.Errorf("%w: %s in %q: %v", ErrConfig, k, spec, err)
		}
	}
	return name, c, nil
}
