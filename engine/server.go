package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/sluice-rtm/sluice/cluster"
	"github.com/sluice-rtm/sluice/cluster/metalog"
	"github.com/sluice-rtm/sluice/cluster/nodelink"
	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/internal/benchhook"
	"github.com/sluice-rtm/sluice/internal/owned"
	"github.com/sluice-rtm/sluice/manager"
	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/presence"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
	"github.com/sluice-rtm/sluice/ws"
)

// Server is a Sluice node running all three roles (gateway, channel
// manager, streamlet host) in one process. Its methods are safe for
// concurrent use.
type Server struct {
	opts    Options
	log     *slog.Logger
	clock   func() time.Time
	maxBody uint32
	welcome wire.Welcome

	host *host.Host
	mgr  *manager.Manager
	gw   *gateway
	// state is this node's replica of the committed streamlet lists
	// (package meta), fed by the metadata log: a single node's (log, a
	// metalog.Single) or the cluster's.
	state *meta.State
	log1  *metalog.Single
	// plane is the gateway's control plane (plane.go): localPlane on a
	// single node, clusterPlane in a cluster.
	plane   plane
	mirrors *mirrorSet
	ret     retention
	// peerMaxBody is the body limit on node-to-node connections.
	peerMaxBody uint32

	nodesMu sync.RWMutex
	nodes   []string // client addresses for WELCOME

	eng     gnet.Engine
	addr    string
	booted  chan error
	done    chan struct{}
	runErr  error
	stopped atomic.Bool

	loopsMu sync.Mutex
	loops   map[gnet.EventLoop]*loop
	loopArr []*loop

	// consoleLast is when the console last collected channel counts
	// (unix ns; console.go).
	consoleLast atomic.Int64

	conns     atomic.Int64
	shutting  atomic.Bool
	draining  atomic.Bool  // Drain was called (drain.go)
	lingering atomic.Int64 // connections refused at open and lingering (lingerRefusal)
	// plainLinks: node connections skip the record layer (the benchmark
	// switch benchhook.SetPlainNodeLinks, read once at Start).
	plainLinks bool
	slowSkips  atomic.Int64
	slowLags   atomic.Int64
	s2Batches  atomic.Uint64 // DATA batches compressed once for S2 subscribers (msgdata.go)
	// Filters (filter.go): distinct compiled filters held (bounded by
	// MaxFilters), evaluations, and evaluations stopped by the cost limit.
	filters, filterEvals, filterAborts atomic.Int64
	fworkers                           *filterWorkers

	// ww wakes loops when a full socket drains (writable_linux.go);
	// writableWakes counts the wake-ups (conn.writable).
	ww            *writeWatch
	writableWakes atomic.Int64

	tickStop chan struct{}
	tickDone chan struct{}
	mem      memState // memSweep's, on the ticker goroutine
	// outTotal is the bytes waiting to be written to this node's client
	// and node connections: the sum of the loops' outbound (publishOut).
	outTotal atomic.Int64

	security               // auth, limits, TLS, metrics (security.go)
	pres     presenceState // presence and occupancy (presence.go)

	// owned counts the goroutines the server started that have not
	// ended (internal/owned): 0 once Shutdown returned.
	owned owned.Count
}

// Start validates opts, starts the event loops and the lifecycle ticker,
// and returns once the server accepts connections on opts.Listen.
func Start(opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Loops == 0 {
		opts.Loops = runtime.NumCPU()
	}
	s := &Server{
		opts: opts, log: opts.Logger, clock: opts.now, plainLinks: benchhook.PlainNodeLinks(),
		booted: make(chan error, 1), done: make(chan struct{}),
		loops:    make(map[gnet.EventLoop]*loop),
		tickStop: make(chan struct{}), tickDone: make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if err := s.initSecurity(); err != nil {
		return nil, err
	}
	s.maxBody = wire.MaxBodyFor(uint32(opts.MaxPayload))
	s.initPresence()
	s.host = host.New(opts.ServerName, s.clock)
	s.host.SetDedup(min(opts.DedupWindow, opts.TTL), opts.DedupIDs)
	s.state = meta.New()
	s.gw = newGateway(opts.Loops)
	s.plane = localPlane{s}
	s.mirrors = newMirrorSet(s)
	s.peerMaxBody = uint32(min(3*max(1<<20, uint64(s.maxBody))+64, 1<<31))
	s.initPlane()
	s.state.SetObserver(s.applied)

	ww, err := newWriteWatch(&s.owned)
	if err != nil {
		s.plane.shutdown() // the cluster's pool and workers
		return nil, fmt.Errorf("engine: write watch: %w", err)
	}
	s.ww = ww
	s.fworkers = newFilterWorkers(s.opts.MaxFilters, opts.Loops) // before any connection can subscribe
	s.runLoops()
	if err := <-s.booted; err != nil {
		s.plane.shutdown()
		return nil, fmt.Errorf("engine: listen on %s: %w", opts.Listen, err)
	}
	err = errors.Join(s.startTLS(), s.startWS(), s.startMetrics())
	if err == nil {
		err = s.plane.start(s.addr)
	}
	if err != nil {
		s.abortStart()
		return nil, err
	}
	s.fworkers.start(s)
	s.owned.Go(s.ticker, func() { close(s.tickDone) })
	s.log.Info("sluice listening", "addr", s.addr, "loops", opts.Loops)
	if s.plainLinks && opts.Cluster != nil {
		s.log.Warn("benchmark switch benchhook.SetPlainNodeLinks is on: node links are authenticated but NOT encrypted or integrity-protected")
	}
	s.warnExposure()
	return s, nil
}

// abortStart undoes a Start that failed once the loops ran: the control
// plane, the listeners of TLS, WebSocket and metrics, and the loops.
func (s *Server) abortStart() {
	s.plane.shutdown()
	s.stopTLSAccept()
	s.stopWSAccept()
	s.stopMetrics()
	_ = s.eng.Stop(context.Background())
	<-s.done
}

// initPlane builds the node's control plane and its manager: the cluster
// layer (package cluster) when Options.Cluster is set, else a single
// node's (the metadata state applied directly, manager.Local as its
// Cluster). Start calls it before the loops run.
func (s *Server) initPlane() {
	mcfg := manager.Config{Node: s.opts.ServerName, NewID: s.host.NewID, Limits: s.opts.limitsFor, Clock: s.clock,
		Logger: s.log, DedupWindow: min(s.opts.DedupWindow, s.opts.TTL), State: s.state}
	if s.opts.Cluster != nil {
		cl := cluster.New(cluster.Config{Options: *s.opts.Cluster, Self: s.opts.ServerName, Instance: instanceID(),
			Host: s.host, State: s.state, Gateway: clusterGateway{s}, Transport: transport{s},
			Conns: nodelink.ConnOptions{MaxBody: s.peerMaxBody, RequireSecret: s.opts.Auth != nil,
				HandshakeTimeout: s.opts.HandshakeTimeout, IdleTimeout: s.opts.IdleTimeout,
				PingInterval: s.opts.PingInterval, FrameTimeout: s.opts.FrameTimeout, Plain: s.plainLinks},
			Log: s.log, Clock: s.clock, Limits: s.opts.limitsFor, Cut: s.opts.cutPeer, Service: presenceService{s}})
		s.pres.sync = presence.NewSyncer(s.pres.reg, func(node string, body []byte) ([]byte, error) {
			return cl.Call(node, wire.OpPresenceSync, body)
		})
		hooks := cl.Hooks()
		mcfg.Log, mcfg.Cluster, mcfg.DropGrace = hooks, hooks, dropGrace
		s.mgr = manager.New(mcfg)
		cl.SetManager(s.mgr)
		s.plane = clusterPlane{s, cl}
	} else {
		if s.opts.Replicas > 1 {
			s.log.Warn("sluice: replicas > 1 has no effect on a single node: it holds one copy of each streamlet", "replicas", s.opts.Replicas)
		}
		s.log1 = metalog.NewSingle(s.opts.ServerName, singleFSM{s.state}, 0)
		mcfg.Log, mcfg.Cluster = s.log1, manager.Local(s.opts.ServerName, s.host)
		s.mgr = manager.New(mcfg)
		s.mgr.Lead()
	}
}

// runLoops runs the event loops (gnet) on a goroutine of the server's;
// s.booted gets the outcome of their start, and s.done is closed once
// they are gone.
func (s *Server) runLoops() {
	h := &handler{srv: s}
	s.owned.Go(func() {
		err := gnet.Run(h, "tcp://"+s.opts.Listen, append([]gnet.Option{
			gnet.WithMulticore(true),
			gnet.WithNumEventLoop(s.opts.Loops),
			gnet.WithTCPNoDelay(gnet.TCPNoDelay),
			gnet.WithReuseAddr(true),
			gnet.WithLogger(gnetLogger{s.log}),
		}, s.tlsGnetOptions()...)...)
		s.runErr = err
		select {
		case s.booted <- err:
		default:
		}
		s.stopped.Store(true)
		s.ww.close() // the loops are gone: nothing arms it any more
	}, func() { close(s.done) })
}

// welcomeNow returns the WELCOME to send, with the current node list.
func (s *Server) welcomeNow() wire.Welcome {
	w := s.welcome
	s.nodesMu.RLock()
	w.Nodes = s.nodes
	s.nodesMu.RUnlock()
	return w
}

// setNodes replaces the client addresses advertised in WELCOME; the slice
// is not modified afterwards.
func (s *Server) setNodes(addrs []string) {
	s.nodesMu.Lock()
	s.nodes = addrs
	s.nodesMu.Unlock()
}

// streamletFor returns the streamlet ref of channel for reading: the
// hosted one when this node hosts it, else this node's copy, created and
// fed by the host on first use.
func (s *Server) streamletFor(channel string, ref role.StreamletRef) *host.Streamlet {
	if ref.Host == s.host.Node() {
		return s.host.Streamlet(ref.ID)
	}
	if len(ref.Replicas) > 1 && slices.Contains(ref.Replicas, s.host.Node()) {
		// A replica here: read it (it shows what every replica holds).
		if st := s.host.Streamlet(ref.ID); st != nil {
			return st
		}
	}
	return s.mirrors.get(channel, ref)
}

// Cluster reports the node's view of the cluster; ok is false on a
// single node.
func (s *Server) Cluster() (st Status, ok bool) { return s.plane.status() }

// Addr returns the address the server listens on, with the port chosen
// when Options.Listen had port 0.
func (s *Server) Addr() string { return s.addr }

// Done is closed when the server has stopped.
func (s *Server) Done() <-chan struct{} { return s.done }

// tickInterval is how often the streamlet lifecycle and the loops' sweeps
// run: a quarter of the shortest lease, TTL, handshake timeout, idle
// timeout or ping interval in force, within 5ms..250ms.
func (s *Server) tickInterval() time.Duration {
	d := min(s.opts.LimitLife, s.opts.TTL, s.opts.HandshakeTimeout)
	if s.opts.FrameTimeout > 0 {
		d = min(d, s.opts.FrameTimeout)
	}
	if s.opts.IdleTimeout > 0 {
		d = min(d, s.opts.IdleTimeout)
		if s.opts.PingInterval > 0 {
			d = min(d, s.opts.PingInterval)
		}
	}
	for _, r := range s.opts.ChannelRules {
		if r.LimitLife > 0 {
			d = min(d, r.LimitLife)
		}
		if r.TTL > 0 {
			d = min(d, r.TTL)
		}
	}
	return min(max(d/4, 5*time.Millisecond), 250*time.Millisecond)
}

// ticker drives time-based decisions: streamlet leases, expiry and the
// loops' sweeps.
func (s *Server) ticker() {
	t := time.NewTicker(s.tickInterval())
	defer t.Stop()
	// The retention budget is checked more often than the lifecycle
	// ticks: at a high publish rate each interval adds its worth of
	// history above the budget.
	rt := time.NewTicker(retentionInterval)
	defer rt.Stop()
	mt := time.NewTicker(memInterval)
	defer mt.Stop()
	pt := time.NewTicker(s.opts.Presence.OccupancyInterval)
	defer pt.Stop()
	s.mem.lastAllocs = heapAllocs() // so that the first memSweep can tell a quiet server
	for {
		select {
		case <-s.tickStop:
			s.fworkers.stopAll() // their lifetime ends with the ticker's
			return
		case <-rt.C:
			s.retentionSweep()
			s.trimHistory()
		case <-mt.C:
			s.memSweep()
		case <-pt.C:
			s.pres.reg.Tick()
		case <-t.C:
			now := s.clock()
			s.mgr.Tick(now)
			s.mirrors.sweep(now.UnixNano())
			s.plane.sweep()
			for _, l := range s.loopList() {
				l.execute(l.sweep)
			}
		}
	}
}

func (s *Server) loopList() []*loop {
	s.loopsMu.Lock()
	defer s.loopsMu.Unlock()
	return append([]*loop(nil), s.loopArr...)
}

// loopOf returns Sluice's state for gnet event loop el.
func (s *Server) loopOf(el gnet.EventLoop) *loop {
	s.loopsMu.Lock()
	defer s.loopsMu.Unlock()
	l := s.loops[el]
	if l == nil {
		l = newLoop(len(s.loopArr), el, s)
		s.loops[el] = l
		s.loopArr = append(s.loopArr, l)
	}
	return l
}

// Shutdown stops the server gracefully: it stops accepting work, sends
// GOAWAY SHUTTING_DOWN to every client, waits until their pending output
// is written (or ctx ends), then closes every connection and stops.
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.shutting.CompareAndSwap(false, true) {
		<-s.done
		return nil
	}
	s.stopTLSAccept()
	s.stopWSAccept()
	close(s.tickStop)
	<-s.tickDone // the filter workers stopped too
	s.plane.shutdown()
	s.closePresence()
	ls := s.loopList()
	gone := make(chan struct{}, len(ls))
	for _, l := range ls {
		l.execute(func() { l.goAway(); gone <- struct{}{} })
	}
	for range ls {
		select {
		case <-gone:
		case <-ctx.Done():
		}
	}
	s.drain(ctx)
	err := s.eng.Stop(context.Background())
	<-s.done
	s.waitTLS(ctx)
	s.waitWSS(ctx)
	s.stopMetrics()
	s.log.Info("sluice stopped", "addr", s.addr)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// drain waits until no connection has output pending, polling every few
// milliseconds, or until ctx ends.
func (s *Server) drain(ctx context.Context) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		ls := s.loopList()
		pending := make(chan int, len(ls))
		for _, l := range ls {
			l.execute(func() {
				n := 0
				for c := range l.conns {
					n += c.gc.OutboundBuffered()
				}
				pending <- n
			})
		}
		total := 0
		for range ls {
			select {
			case n := <-pending:
				total += n
			case <-ctx.Done():
				return
			}
		}
		if total == 0 {
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

func isTooLarge(err error) bool { return errors.Is(err, wire.ErrTooLarge) }

// handler adapts gnet's callbacks to the loops.
type handler struct {
	gnet.BuiltinEventEngine
	srv *Server
}

func (h *handler) OnBoot(eng gnet.Engine) gnet.Action {
	s := h.srv
	s.eng = eng
	addr, err := boundAddr(eng)
	if err != nil {
		s.booted <- err
		return gnet.Shutdown
	}
	s.addr = addr
	// WELCOME is built here, before gnet starts the loops that read it.
	s.welcome = wire.Welcome{
		Version: wire.Version1, MaxPayload: uint32(s.opts.MaxPayload), MaxBody: s.maxBody,
		MaxSubs:   uint16(s.opts.MaxSubsPerConn),
		LimitMsgs: uint32(s.opts.LimitMsgs), LimitSize: uint32(s.opts.LimitSize),
		LimitLife: s.opts.LimitLife, TTL: s.opts.TTL, PingInterval: s.opts.PingInterval,
		ServerName: s.opts.ServerName,
		// Sent to clients that negotiate headers (PROTOCOL.md 2.2): the
		// window the host applies (never longer than the TTL).
		DedupWindow: min(s.opts.DedupWindow, s.opts.TTL), DedupIDs: uint32(s.opts.DedupIDs),
	}
	s.setNodes([]string{s.addr})
	s.booted <- nil
	return gnet.None
}

// boundAddr reads the listener's address from a duplicate of its socket.
func boundAddr(eng gnet.Engine) (string, error) {
	fd, err := eng.Dup()
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return "", os.NewSyscallError("getsockname", err)
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port)), nil
	case *unix.SockaddrInet6:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port)), nil
	}
	return "", fmt.Errorf("engine: unexpected listener address %T", sa)
}

func (h *handler) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	s := h.srv
	if e, ok := gc.Context().(nodelink.Enrolled); ok {
		// An outbound node link enrolled by transport.Enroll (nodelink.go).
		l := s.loopOf(gc.EventLoop())
		c := l.open(gc)
		s.conns.Add(1)
		c.node = e
		if !e.Attach((*nodeCarrier)(c)) {
			c.closing = true
			return nil, gnet.Close
		}
		return nil, gnet.None
	}
	br, _ := gc.Context().(*bridged) // set by the TLS bridge and the WebSocket listener
	l := s.loopOf(gc.EventLoop())
	c := l.open(gc)
	if br != nil && br.ws {
		c.ws = &wsConn{}
	}
	n := s.conns.Add(1)
	switch {
	case s.shutting.Load():
		s.countReject(RejectShutting)
		return c.refuse(wire.CodeShuttingDown, "server shutting down")
	case n > int64(s.opts.MaxConns):
		s.countReject(RejectMaxConns)
		return c.refuse(wire.CodeTooManyConnections, fmt.Sprintf("server is at its limit of %d connections", s.opts.MaxConns))
	}
	return s.admit(c, br)
}

// refuse is the answer to a connection refused in OnOpen: an ERROR, or
// for a WebSocket connection (not upgraded yet) an HTTP 503.
func (c *conn) refuse(code wire.Code, text string) ([]byte, gnet.Action) {
	c.closing = true
	if c.ws != nil {
		return ws.AppendReject(nil, wsHTTPStatus(code), text), gnet.Close
	}
	return c.l.srv.lingerRefusal(c, wire.AppendError(nil, 0, wire.Error{Code: code, Retriable: code.Retriable(), Text: text}))
}

func (h *handler) OnClose(gc gnet.Conn, _ error) gnet.Action {
	if c, ok := gc.Context().(*conn); ok {
		c.l.closed(c)
	}
	return gnet.None
}

func (h *handler) OnTraffic(gc gnet.Conn) gnet.Action {
	c, ok := gc.Context().(*conn)
	if !ok {
		return gnet.Close
	}
	return c.l.traffic(c)
}

// gnetLogger sends gnet's own log lines to slog at debug level (errors at
// warn), so that the engine has one log stream.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(f string, a ...any) { g.l.Debug(fmt.Sprintf(f, a...), "src", "gnet") }
func (g gnetLogger) Infof(f string, a ...any)  { g.l.Debug(fmt.Sprintf(f, a...), "src", "gnet") }
func (g gnetLogger) Warnf(f string, a ...any)  { g.l.Warn(fmt.Sprintf(f, a...), "src", "gnet") }
func (g gnetLogger) Errorf(f string, a ...any) { g.l.Warn(fmt.Sprintf(f, a...), "src", "gnet") }
func (g gnetLogger) Fatalf(f string, a ...any) { g.l.Error(fmt.Sprintf(f, a...), "src", "gnet") }
