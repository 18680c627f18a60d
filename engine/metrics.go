package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-rtm/sluice/console"
	"github.com/sluice-rtm/sluice/wire"
)

// loopStats are one loop's counters. They are plain integers written only
// on the loop's goroutine (no atomics on the message path); a scrape reads
// them with a task on the loop (Server.Metrics).
type loopStats struct {
	bytesIn   uint64 // frame bytes read from clients
	msgsIn    uint64 // publishes stored
	payloadIn uint64 // payload bytes of those publishes
	msgsOut   uint64 // messages sent in DATA frames (once per subscriber)
	bytesOut  uint64 // bytes handed to the sockets
	// writesBuffered counts writes (conn.writev) that the socket did not
	// take whole: the rest waited in gnet's outbound buffer.
	writesBuffered uint64
	// wakeTasks counts the tasks posted to other loops to wake their
	// readers of channels published to on this one (loop.postWakes).
	wakeTasks uint64
	errs      [32]uint64
	// frameTimeouts counts connections closed by Options.FrameTimeout.
	frameTimeouts uint64
	gaps          [4]uint64 // by wire.GapReason
	wsErrors      uint64    // WebSocket connections closed for malformed WebSocket input
}

// countError counts an ERROR frame sent with code.
func (st *loopStats) countError(code wire.Code) {
	if int(code) < len(st.errs) {
		st.errs[code]++
	}
}

// countGap counts a GAP frame sent with reason r.
func (st *loopStats) countGap(r wire.GapReason) {
	if int(r) < len(st.gaps) {
		st.gaps[r]++
	}
}

// Reasons a connection is refused before it is served, the keys of
// Metrics.Rejected.
const (
	RejectMaxConns     = "max_conns"
	RejectPerAddr      = "max_conns_per_addr"
	RejectShutting     = "shutting_down"
	RejectTLSHandshake = "tls_handshake"
	// RejectWSUpgrade: a WebSocket upgrade request was refused (bad
	// request, disallowed origin, wrong version, timeout).
	RejectWSUpgrade = "ws_upgrade"
)

var rejectReasons = []string{RejectMaxConns, RejectPerAddr, RejectShutting, RejectTLSHandshake, RejectWSUpgrade}

// Metrics is a snapshot of a server's counters (totals since Start) and
// gauges (values now). The maps are the caller's.
type Metrics struct {
	Node string

	Connections    int64 // open client connections (gauge)
	TLSConnections int64 // of which came through the TLS listener (gauge)
	WSConnections  int64 // of which came through the WebSocket listener (gauge)
	// WSErrors counts WebSocket connections closed for malformed
	// WebSocket input (close codes 1002, 1003, 1007, 1009).
	WSErrors      int64
	Subscriptions int64 // gauge
	Accepted      int64 // connections admitted (TCP or TLS; not refused at open) in total
	// Rejected counts connections refused before HELLO, by reason
	// (Reject... constants).
	Rejected map[string]int64

	MessagesIn  int64 // publishes stored
	PayloadIn   int64 // their payload bytes
	BytesIn     int64 // frame bytes read from clients
	MessagesOut int64 // messages delivered (once per subscriber)
	BytesOut    int64 // bytes written to clients
	// WritesBuffered counts writes to connections that the socket did not
	// take whole, so that the rest waited in the server's outbound buffer
	// (a peer reading slower than the server writes).
	WritesBuffered int64
	Errors         map[string]int64
	Gaps           map[string]int64 // GAP frames by reason name
	SlowLags       int64            // slow-consumer policy "lag" applied (left the live stream)
	SlowSkips      int64            // slow-consumer policy "skip" applied
	SlowCloses     int64            // connections closed as slow consumers
	AuthReloads    int64
	// JWTs: tokens refused (in HELLO or REFRESH), REFRESHes taken, and
	// connections closed with TOKEN_EXPIRED.
	JWTRefused, JWTRefreshes, TokensExpired int64
	// Filters: distinct compiled filters held, evaluations (one per
	// message per distinct filter), evaluations stopped by the cost limit.
	Filters, FilterEvals, FilterAborts int64
	Unauthorized                       int64 // ERROR UNAUTHENTICATED sent
	Forbidden                          int64 // ERROR FORBIDDEN sent
	// Violations counts limit violations by limit: handshake_timeout,
	// idle_timeout, frame_timeout, publish_rate, max_conns, max_conns_per_addr.
	Violations map[string]int64

	StreamletsHosted  int64 // gauge
	StreamletsCreated int64
	// RetainedBytes is the memory of the message history this node holds
	// (hosted streamlets and gateway copies; gauge); RetentionExpired counts the streamlets and copies expired
	// ahead of their TTL because it exceeded Options.MaxRetained.
	RetainedBytes int64
	// OutboundBytes is the output waiting to be written to this node's
	// connections (gauge, as of the loops' last sweeps); the retention
	// budget covers it together with RetainedBytes.
	OutboundBytes    int64
	RetentionExpired int64
	// Presence is the node's presence and occupancy (presence.go).
	Presence PresenceStats
	Channels int64 // managed channels (gauge)
	Grants   int64 // write grants issued
	Degraded int64 // streamlets opened with fewer replicas than configured
	// Copies of closed streamlets made for draining holders (manager):
	// done, failed, running now, waiting at the last tick; and the copies
	// this node adopted. Draining: the node drains.
	CopiesDone, CopiesFailed int64
	CopiesRunning            int
	CopiesWaiting            int64
	StreamletsAdopted        int64
	Draining                 bool

	HeapBytes  int64   // Go heap in use (gauge)
	Goroutines int64   // gauge
	CPUSeconds float64 // process user+system CPU time
}

// loopGauges is what a scrape collects from one loop.
type loopGauges struct {
	st                   loopStats
	conns, tls, ws, subs int64
}

// gatherLoops sums the gauges of every loop: one task each, waiting for
// their answers until ctx ends (a loop that did not answer by then is left
// out).
func (s *Server) gatherLoops(ctx context.Context) loopGauges {
	ls := s.loopList()
	ch := make(chan loopGauges, len(ls))
	sent := 0
	for _, l := range ls {
		err := l.el.Execute(ctx, task{l, func() { ch <- l.gauges() }})
		if err == nil {
			sent++
		}
	}
	var sum loopGauges
	for range sent {
		select {
		case g := <-ch:
			sum.add(g)
		case <-ctx.Done():
			return sum
		}
	}
	return sum
}

// gauges counts the loop's open connections and subscriptions, with its
// counters. On the loop.
func (l *loop) gauges() loopGauges {
	g := loopGauges{st: l.stats}
	for c := range l.conns {
		if c.closed {
			continue
		}
		g.conns++
		if c.sec.tls {
			g.tls++
		}
		if c.ws != nil {
			g.ws++
		}
		g.subs += int64(len(c.subs))
	}
	return g
}

// add adds o's gauges and counters to g.
func (g *loopGauges) add(o loopGauges) {
	g.conns += o.conns
	g.tls += o.tls
	g.ws += o.ws
	g.subs += o.subs
	st := &g.st
	st.wsErrors += o.st.wsErrors
	st.bytesIn += o.st.bytesIn
	st.msgsIn += o.st.msgsIn
	st.payloadIn += o.st.payloadIn
	st.msgsOut += o.st.msgsOut
	st.bytesOut += o.st.bytesOut
	st.writesBuffered += o.st.writesBuffered
	st.frameTimeouts += o.st.frameTimeouts
	for i := range st.errs {
		st.errs[i] += o.st.errs[i]
	}
	for i := range st.gaps {
		st.gaps[i] += o.st.gaps[i]
	}
}

// Metrics collects a snapshot: counters from every loop (one task each, so
// it waits for busy loops at most until ctx ends; loops that did not
// answer are left out) and the node's load. Safe for concurrent use.
func (s *Server) Metrics(ctx context.Context) Metrics {
	sum := s.gatherLoops(ctx)
	hl := s.host.Load()
	m := Metrics{
		Node:        s.opts.ServerName,
		Connections: sum.conns, TLSConnections: sum.tls, WSConnections: sum.ws, WSErrors: int64(sum.st.wsErrors),
		Subscriptions: sum.subs,
		Accepted:      s.accepted.Load(), Rejected: make(map[string]int64),
		MessagesIn: int64(sum.st.msgsIn), PayloadIn: int64(sum.st.payloadIn), BytesIn: int64(sum.st.bytesIn),
		MessagesOut: int64(sum.st.msgsOut), BytesOut: int64(sum.st.bytesOut), WritesBuffered: int64(sum.st.writesBuffered),
		Errors: make(map[string]int64), Gaps: make(map[string]int64),
		SlowLags: s.slowLags.Load(), SlowSkips: s.slowSkips.Load(), SlowCloses: int64(sum.st.errs[wire.CodeSlowConsumer]),
		AuthReloads: s.reloads.Load(),
		JWTRefused:  s.jwtRefused.Load(), JWTRefreshes: s.jwtRefreshes.Load(), TokensExpired: s.jwtExpired.Load(),
		Filters: s.filters.Load(), FilterEvals: s.filterEvals.Load(), FilterAborts: s.filterAborts.Load(),
		Unauthorized: int64(sum.st.errs[wire.CodeUnauthenticated]),
		Forbidden:    int64(sum.st.errs[wire.CodeForbidden]),
		Violations:   make(map[string]int64),

		StreamletsHosted: hl.Hosted, StreamletsCreated: hl.Created,
		RetainedBytes: hl.Retained, RetentionExpired: s.ret.expired.Load(), OutboundBytes: s.outbound(),
		Channels: int64(s.mgr.Channels()), Grants: s.mgr.Grants(), Degraded: s.mgr.Degraded(),
		StreamletsAdopted: int64(hl.Adopted),
		Goroutines:        int64(runtime.NumGoroutine()), CPUSeconds: cpuSeconds(),
	}
	for i, r := range rejectReasons {
		m.Rejected[r] = s.rejected[i].Load()
	}
	for c := wire.Code(1); int(c) < len(sum.st.errs); c++ {
		// Every defined code, zeros included, so that series are stable.
		if name := c.String(); !strings.HasPrefix(name, "Code(") {
			m.Errors[name] = int64(sum.st.errs[c])
		}
	}
	m.Errors[wire.CodeTooManyConnections.String()] += m.Rejected[RejectMaxConns] + m.Rejected[RejectPerAddr]
	for r := wire.GapExpired; r <= wire.GapLost; r++ {
		m.Gaps[r.String()] = int64(sum.st.gaps[r])
	}
	m.Violations["handshake_timeout"] = int64(sum.st.errs[wire.CodeHandshakeTimeout]) + m.Rejected[RejectTLSHandshake]
	m.Violations["idle_timeout"] = int64(sum.st.errs[wire.CodeIdleTimeout] - sum.st.frameTimeouts)
	m.Violations["frame_timeout"] = int64(sum.st.frameTimeouts)
	m.Violations["publish_rate"] = int64(sum.st.errs[wire.CodeRateLimited])
	m.Violations["max_conns"] = m.Rejected[RejectMaxConns]
	m.Violations["max_conns_per_addr"] = m.Rejected[RejectPerAddr]
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.HeapBytes = int64(ms.HeapInuse)
	m.CopiesDone, m.CopiesFailed, m.CopiesRunning, m.CopiesWaiting = s.mgr.CopyStats()
	m.Draining = s.draining.Load()
	m.Presence = s.pres.reg.Stats()
	return m
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// promWriter writes the Prometheus text exposition format (version 0.0.4).
// A write error sticks in the bufio.Writer, and WriteMetrics returns it
// from Flush.
type promWriter struct {
	w *bufio.Writer
}

func (p *promWriter) family(name, typ, help string) {
	fmt.Fprintf(p.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// sample writes one line; labels are name/value pairs.
func (p *promWriter) sample(name string, v float64, labels ...string) {
	p.w.WriteString(name)
	if len(labels) > 0 {
		p.w.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				p.w.WriteByte(',')
			}
			p.w.WriteString(labels[i])
			p.w.WriteString(`="`)
			p.w.WriteString(escapeLabel(labels[i+1]))
			p.w.WriteByte('"')
		}
		p.w.WriteByte('}')
	}
	p.w.WriteByte(' ')
	p.w.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	p.w.WriteByte('\n')
}

func (p *promWriter) one(name, typ, help string, v float64, labels ...string) {
	p.family(name, typ, help)
	p.sample(name, v, labels...)
}

func (p *promWriter) byKey(name, typ, help, label string, m map[string]int64) {
	p.family(name, typ, help)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p.sample(name, float64(m[k]), label, k)
	}
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }

// WriteMetrics writes m in the Prometheus text format.
func WriteMetrics(w io.Writer, m Metrics) error {
	p := &promWriter{w: bufio.NewWriter(w)}
	p.one("sluice_connections", "gauge", "Open client connections.", float64(m.Connections))
	p.one("sluice_tls_connections", "gauge", "Open client connections that came through the TLS listener.", float64(m.TLSConnections))
	p.one("sluice_ws_connections", "gauge", "Open client connections that came through the WebSocket listener.", float64(m.WSConnections))
	p.one("sluice_ws_protocol_closes_total", "counter", "WebSocket connections closed for malformed WebSocket input (close 1002, 1003, 1007, 1009).", float64(m.WSErrors))
	p.one("sluice_subscriptions", "gauge", "Active subscriptions.", float64(m.Subscriptions))
	p.one("sluice_connections_accepted_total", "counter", "Client connections admitted (TCP or TLS), not counting those refused when opened.", float64(m.Accepted))
	p.byKey("sluice_connections_rejected_total", "counter", "Client connections refused before the handshake, by reason.", "reason", m.Rejected)
	p.one("sluice_messages_in_total", "counter", "Messages published and stored.", float64(m.MessagesIn))
	p.one("sluice_message_bytes_in_total", "counter", "Payload bytes of the messages published.", float64(m.PayloadIn))
	p.one("sluice_received_bytes_total", "counter", "Frame bytes read from clients.", float64(m.BytesIn))
	p.one("sluice_messages_out_total", "counter", "Messages delivered to subscribers (once per subscriber).", float64(m.MessagesOut))
	p.one("sluice_sent_bytes_total", "counter", "Bytes written to clients.", float64(m.BytesOut))
	p.one("sluice_writes_buffered_total", "counter", "Writes to connections that the socket did not take whole (the rest waited in the outbound buffer: a peer reading slower than the server writes).", float64(m.WritesBuffered))
	p.byKey("sluice_errors_total", "counter", "ERROR frames sent, by code.", "code", m.Errors)
	p.byKey("sluice_gaps_total", "counter", "GAP frames sent, by reason.", "reason", m.Gaps)
	p.family("sluice_slow_consumer_actions_total", "counter", "Slow-consumer policy actions: lag (read on from history), skip (GAP slow) or disconnect.")
	p.sample("sluice_slow_consumer_actions_total", float64(m.SlowLags), "action", "lag")
	p.sample("sluice_slow_consumer_actions_total", float64(m.SlowSkips), "action", "skip")
	p.sample("sluice_slow_consumer_actions_total", float64(m.SlowCloses), "action", "disconnect")
	p.family("sluice_auth_failures_total", "counter", "Requests refused by authentication or permissions.")
	p.sample("sluice_auth_failures_total", float64(m.Unauthorized), "kind", "unauthenticated")
	p.sample("sluice_auth_failures_total", float64(m.Forbidden), "kind", "forbidden")
	p.one("sluice_auth_reloads_total", "counter", "Authentication setups installed after start (SetAuth, SIGHUP).", float64(m.AuthReloads))
	p.one("sluice_jwt_refused_total", "counter", "JWTs refused in HELLO or REFRESH (bad signature, algorithm, key, expiry, claims).", float64(m.JWTRefused))
	p.one("sluice_jwt_refreshes_total", "counter", "REFRESHes that replaced a connection's JWT.", float64(m.JWTRefreshes))
	p.one("sluice_tokens_expired_total", "counter", "Connections closed with TOKEN_EXPIRED (no REFRESH within the grace period).", float64(m.TokensExpired))
	p.one("sluice_filters", "gauge", "Distinct filter expressions compiled on this node (per channel).", float64(m.Filters))
	p.one("sluice_filter_evaluations_total", "counter", "Filter evaluations: one per message per distinct filter on the node.", float64(m.FilterEvals))
	p.one("sluice_filter_aborted_total", "counter", "Filter evaluations stopped by the cost limit (the message did not match).", float64(m.FilterAborts))
	p.byKey("sluice_limit_violations_total", "counter", "Violations of the abuse limits, by limit.", "limit", m.Violations)
	p.one("sluice_streamlets_created_total", "counter", "Streamlets created on this node.", float64(m.StreamletsCreated))
	p.one("sluice_grants_total", "counter", "Write grants issued by this node's channel manager.", float64(m.Grants))
	p.one("sluice_streamlets_degraded_total", "counter", "Streamlets this node's manager opened with fewer replicas than configured (too few live nodes).", float64(m.Degraded))
	p.one("sluice_channels", "gauge", "Channels managed by this node.", float64(m.Channels))
	p.family("sluice_streamlet_copies_total", "counter", "Copies of closed streamlets this node's manager had made because a holder drains or died (re-replication up to the replica count), by outcome (failed ones are tried again).")
	p.sample("sluice_streamlet_copies_total", float64(m.CopiesDone), "outcome", "done")
	p.sample("sluice_streamlet_copies_total", float64(m.CopiesFailed), "outcome", "failed")
	p.one("sluice_streamlet_copies_running", "gauge", "Copies this node's manager is making now (at most 4).", float64(m.CopiesRunning))
	p.one("sluice_streamlets_awaiting_copy", "gauge", "Streamlets held by fewer usable nodes than they should be (a holder drains or died): closed ones waiting for a copy, open ones waiting for a recovery; counted by the metadata log's leader, 0 elsewhere.", float64(m.CopiesWaiting))
	p.one("sluice_streamlets_adopted_total", "counter", "Copies of other nodes' streamlets this node took over and holds.", float64(m.StreamletsAdopted))
	p.one("sluice_draining", "gauge", "1 while this node drains (lame duck: SIGTERM or sluice cluster drain).", b2f(m.Draining))
	node := []string{"node", m.Node}
	p.one("sluice_node_streamlets_hosted", "gauge", "Node load: streamlets hosted.", float64(m.StreamletsHosted), node...)
	p.one("sluice_node_connections", "gauge", "Node load: client connections.", float64(m.Connections), node...)
	p.one("sluice_node_retained_bytes", "gauge", "Node load: memory of the message history held (hosted streamlets and gateway copies), bytes.", float64(m.RetainedBytes), node...)
	p.family("sluice_node_memory_bytes", "gauge", "Memory by part: history (hosted streamlets and gateway copies) and outbound (output waiting for readers) count against --max-retained; heap is the Go heap in use, everything included.")
	p.sample("sluice_node_memory_bytes", float64(m.RetainedBytes), "part", "history")
	p.sample("sluice_node_memory_bytes", float64(m.OutboundBytes), "part", "outbound")
	p.sample("sluice_node_memory_bytes", float64(m.HeapBytes), "part", "heap")
	p.one("sluice_retention_expired_total", "counter", "Streamlets and gateway copies expired before their TTL because the node exceeded its retention budget.", float64(m.RetentionExpired))
	p.one("sluice_node_heap_bytes", "gauge", "Node load: Go heap in use, bytes.", float64(m.HeapBytes), node...)
	p.one("sluice_node_goroutines", "gauge", "Node load: goroutines.", float64(m.Goroutines), node...)
	p.one("sluice_node_cpu_seconds_total", "counter", "Node load: process CPU time (user+system).", m.CPUSeconds, node...)
	writePresenceMetrics(p, m.Presence)
	return p.w.Flush()
}

// scrapeTimeout bounds how long /metrics waits for busy loops.
const scrapeTimeout = 2 * time.Second

// Handler returns the HTTP handler of the metrics listener: /metrics
// (Prometheus text format), /healthz (200 while the server runs) and
// /readyz (200 while it accepts clients, 503 once it drains or shuts down). Safe for
// concurrent use.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), scrapeTimeout)
		defer cancel()
		m := s.Metrics(ctx)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = WriteMetrics(w, m)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if s.stopped.Load() {
			http.Error(w, "stopped", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	ch := console.Handler(s.consoleSource())
	mux.Handle("GET /console/", ch)
	mux.Handle("GET /console", ch)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.stopped.Load() || s.shutting.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		if s.draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}

// MetricsAddr returns the address of the metrics listener ("" without
// one), with the port chosen when Options.MetricsListen had port 0.
func (s *Server) MetricsAddr() string { return s.metricsAddr }

// startMetrics starts the HTTP listener of Options.MetricsListen.
func (s *Server) startMetrics() error {
	if s.opts.MetricsListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.opts.MetricsListen)
	if err != nil {
		return fmt.Errorf("engine: metrics listen on %s: %w", s.opts.MetricsListen, err)
	}
	s.metricsAddr = ln.Addr().String()
	s.httpSrv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	s.httpDone = make(chan struct{})
	s.owned.Go(func() { // owned by the Server: stopMetrics waits for it
		if err := s.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("metrics listener stopped", "err", err)
		}
	}, func() { close(s.httpDone) })
	s.log.Info("metrics listening", "addr", s.metricsAddr)
	return nil
}

func (s *Server) stopMetrics() {
	if s.httpSrv != nil {
		if err := s.httpSrv.Close(); err != nil {
			s.log.Warn("closing the metrics listener", "err", err)
		}
		<-s.httpDone
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
