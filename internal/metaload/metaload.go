// Package metaload generates the metadata log's command stream of many
// channels rolling over (package meta's commands), deterministically, for
// benchmarks and tests of the state machine and its log: every channel in
// turn closes its open streamlet and opens the next one (an OPEN), and
// the streamlets beyond the newest Keep are expired in batches (an
// EXPIRE), as the leader's manager does. Applied in order, every command
// succeeds; the generator tracks each channel's tail itself, so it never
// reads the state.
package metaload

import (
	"fmt"
	"time"

	"github.com/sluice-rtm/sluice/meta"
)

// Config describes the load. Zero fields take the defaults noted.
type Config struct {
	// Channels rolling over, in turn. Default 100,000.
	Channels int
	// Keep is how many streamlets each channel retains (the open one
	// included): the older are expired. Default 6; at least 2, so that an
	// EXPIRE never names a streamlet whose closing OPEN may still be in
	// flight when commands are proposed concurrently.
	Keep int
	// Replicas per streamlet, drawn in turn from Nodes. Default 2.
	Replicas int
	// Nodes holding streamlets. Default five names of 8 bytes.
	Nodes []string
	// Msgs is how many positions a streamlet covers when it closes.
	// Default 5,000.
	Msgs uint64
	// Period is how often each channel rolls over (the commands' clock
	// advances by Period/Channels per rollover). Default 4 s.
	Period time.Duration
	// TTL is the retention a closing streamlet gets; Life its write lease.
	// Defaults 20 s and 4 s.
	TTL, Life time.Duration
	// ExpireBatch is how many channels' expirations one EXPIRE carries
	// (at most meta.MaxBatch). Default 256.
	ExpireBatch int
	// Start is the clock of the first command (unix ns). Default
	// 2026-01-01.
	Start int64
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Channels, 100_000)
	def(&c.Keep, 6)
	def(&c.Replicas, 2)
	def(&c.ExpireBatch, 256)
	if len(c.Nodes) == 0 {
		c.Nodes = []string{"sluice-0", "sluice-1", "sluice-2", "sluice-3", "sluice-4"}
	}
	if c.Msgs == 0 {
		c.Msgs = 5000
	}
	if c.Period == 0 {
		c.Period = 4 * time.Second
	}
	if c.TTL == 0 {
		c.TTL = 20 * time.Second
	}
	if c.Life == 0 {
		c.Life = 4 * time.Second
	}
	if c.Start == 0 {
		c.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	}
	return c
}

// channel is what the generator knows of one channel's committed list.
type channel struct {
	epoch uint64
	ids   []uint64 // retained streamlets, oldest first; the last is open
	next  uint64   // the open streamlet's first position
	seq   uint64   // streamlets opened
}

// Load is the generator. It is not safe for concurrent use.
type Load struct {
	cfg    Config
	chans  []channel
	turn   int // the channel that rolls over next
	nextID uint64
	now    int64
	step   int64
	expire []meta.Ref
	opens  uint64
}

// New returns a generator of cfg's load. It panics on a configuration it
// cannot generate (a caller's bug).
func New(cfg Config) *Load {
	cfg = cfg.withDefaults()
	if cfg.Keep < 2 || cfg.Replicas < 1 || cfg.Replicas > len(cfg.Nodes) || cfg.Replicas > meta.MaxSet ||
		cfg.ExpireBatch < 1 || cfg.ExpireBatch > meta.MaxBatch || cfg.Channels < 1 {
		panic(fmt.Sprintf("metaload: cannot generate %+v", cfg))
	}
	step := max(int64(cfg.Period)/int64(cfg.Channels), 1)
	return &Load{cfg: cfg, chans: make([]channel, cfg.Channels), nextID: 1, now: cfg.Start, step: step}
}

// Name returns channel i's name (22 bytes for i below a million).
func Name(i int) string { return fmt.Sprintf("tenant-%03d/room-%06d", i%1000, i) }

// Opens returns how many OPENs Next has returned.
func (l *Load) Opens() uint64 { return l.opens }

// Next returns the next command: an EXPIRE once ExpireBatch channels
// have streamlets to expire, else the next channel's rollover.
func (l *Load) Next() meta.Cmd {
	if len(l.expire) >= l.cfg.ExpireBatch {
		c := meta.Cmd{Kind: meta.KindExpire, Time: l.now, Batch: l.expire}
		l.expire = nil
		return c
	}
	i := l.turn
	l.turn = (l.turn + 1) % len(l.chans)
	l.now += l.step
	ch := &l.chans[i]
	name := Name(i)
	set := make([]string, l.cfg.Replicas)
	for k := range set {
		set[k] = l.cfg.Nodes[(i+int(ch.seq)+k)%len(l.cfg.Nodes)]
	}
	c := meta.Cmd{Kind: meta.KindOpen, Time: l.now, Channel: name,
		New: meta.NewStreamlet{ID: l.nextID, Replicas: set, Life: int64(l.cfg.Life)}}
	if ch.epoch == 0 {
		ch.epoch, ch.next = uint64(l.now/1e6), 1
	} else {
		c.Tail = ch.ids[len(ch.ids)-1]
		end := ch.next + l.cfg.Msgs
		c.Seal = meta.Seal{End: end, TTL: int64(l.cfg.TTL)}
		ch.next = end
	}
	c.Epoch = ch.epoch
	ch.ids = append(ch.ids, l.nextID)
	ch.seq++
	l.nextID++
	l.opens++
	if n := len(ch.ids) - l.cfg.Keep; n > 0 {
		l.expire = append(l.expire, meta.Ref{Channel: name, Epoch: ch.epoch, ID: ch.ids[n-1]})
		ch.ids = append(ch.ids[:0], ch.ids[n:]...)
	}
	return c
}
