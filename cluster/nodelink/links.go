// Package nodelink is the transport between the nodes of a cluster: both
// sides of every node connection (PROTOCOL.md 9). It owns the node
// handshake (9.1), the sealed record layer (9.8), the dialed links
// (Link: one per peer, dialed by the goroutine that needs it and enrolled
// in an event loop), the inbound node connections (Accept), heartbeats
// that end a silent link, the correlation of requests with their answers
// (Call), and the bounds on what one peer may have in flight or queued.
//
// It knows nothing of hosts, managers or the metadata: the nodes it may
// dial come from a Directory (the cluster's view), and every frame that
// is not the transport's own goes to the cluster's Handler: NODE_REQUEST
// (Serve, on the pool), NODE_FEED and NODE_REPLICATED on a dialed link,
// and NODE_APPEND, NODE_READ, NODE_UNREAD and NODE_REPLICATE on an
// inbound connection (its InboundHandler). It never touches gnet: the
// engine's event loops carry the connections' bytes through the
// Transport, Conn and NodeConn interfaces.
package nodelink

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/internal/owned"
	"github.com/sluice-rtm/sluice/wire"
)

// ErrNoLink: no link to the node is open (Existing never dials).
var ErrNoLink = errors.New("cluster: no open link to the node")

// Directory is what the links need to know of the nodes (the cluster's
// view). Its methods must not block nor call the Links.
type Directory interface {
	// Dialable returns node's client address when a link to it may be
	// dialed: a live member not marked down (with force: marked down or
	// not).
	Dialable(node string, force bool) (addr string, ok bool)
	// Reached: a link to node was made (force: by the redial).
	Reached(node string, force bool)
	// Unreached lists the live members whose link last failed (Down) and
	// that no link reached since: the heartbeat dials them again.
	Unreached() []string
}

// Handler is the cluster's side of the links: the frames that are not
// the transport's own. Its methods, but Serve, run on an event loop (or
// the heartbeat's goroutine: Down, Heartbeat) and must not block.
type Handler interface {
	// Serve answers one NODE_REQUEST of op from node peer (body valid
	// only during the call) with a status, a result and a text. It runs
	// on the pool (Config.Go) and may wait for the network.
	Serve(peer string, op wire.NodeOp, body []byte) (status uint8, result []byte, text string)
	// Feed takes a NODE_FEED (decoded and inflated) that arrived on the
	// link to node, on the link's loop; stamps and run are valid only
	// during the call.
	Feed(node string, f wire.NodeFeed, stamps, run []byte)
	// Replicated takes a NODE_REPLICATED that arrived on link l, on its
	// loop.
	Replicated(l *Link, r wire.NodeReplicated)
	// Down: the link to node failed, or dialing it did (not a shutdown):
	// the peer may be gone. Directory.Unreached is to list it from then on.
	Down(node string)
	// Heartbeat runs at every heartbeat (on the heartbeat's goroutine,
	// after the redial and before the links are checked) with the time
	// and whether the heartbeat itself ran late (the process was paused:
	// silence says nothing).
	Heartbeat(now int64, paused bool)
}

// Config is what the Links are built from.
type Config struct {
	// Self is this node's name; Secret the cluster secret ("" = none).
	Self, Secret string
	// Conns are the limits of node connections.
	Conns ConnOptions
	// Transport enrolls dialed links in the engine's event loops.
	Transport Transport
	Directory Directory
	Handler   Handler
	// Go runs fn, a NODE_REQUEST served for a peer (Handler.Serve), on
	// the cluster's serving pool, which must not be the one of calls
	// that wait for other nodes (a peer's requests would queue behind
	// calls waiting for that peer); false when it could not (the request
	// is answered OVERLOAD). It must not block.
	Go func(fn func()) bool
	// Stop is closed when the node shuts down: the heartbeat and the
	// redial end, and a link that ends then is no failure.
	Stop <-chan struct{}
	Log  *slog.Logger
	// Clock is the time of the heartbeat (the server's clock).
	Clock func() time.Time
	// RPCTimeout bounds one request (0 = 2 s): a call waits three, a
	// link silent for two is dead, the heartbeat runs every quarter.
	RPCTimeout time.Duration
	// Cut is fault injection for tests (nil in production): while it
	// reports true for a peer, nothing sent to it arrives. Any goroutine;
	// must not block.
	Cut func(peer string) bool
}

// Links are this node's links to its peers and the inbound node
// connections it accepts. Safe for concurrent use; mu is never held
// across network I/O.
type Links struct {
	cfg Config
	// clientAddr is this node's client address, sent in NODE_HELLO; set
	// by SetClientAddr, before anything dials.
	clientAddr string

	mu      sync.RWMutex
	links   map[string]*Link
	dialing map[string]*dial // dials in progress, by node

	failures atomic.Int64 // links that ended other than by shutdown

	// The heartbeat's and the redial's goroutines (owned), until Stop.
	owned owned.Count
	wg    sync.WaitGroup
	// lastBeat is when the heartbeat last ran (its goroutine only);
	// redialing is set while the redial's dialer runs.
	lastBeat  int64
	redialing atomic.Bool
}

// New returns the links; Start starts their heartbeat.
func New(cfg Config) *Links {
	return &Links{cfg: cfg, links: make(map[string]*Link), dialing: make(map[string]*dial)}
}

// SetClientAddr sets this node's client address, which NODE_HELLO tells
// the peers it dials. Call it once, before the Directory names any node
// (nothing is dialed before).
func (ls *Links) SetClientAddr(addr string) { ls.clientAddr = addr }

// Start starts the heartbeat. Call it once.
func (ls *Links) Start() {
	ls.wg.Add(1)
	ls.owned.Go(ls.heartbeats, ls.wg.Done)
}

// Wait waits, once Config.Stop is closed, until the goroutines of the
// links (the heartbeat and the redial) have ended.
func (ls *Links) Wait() { ls.wg.Wait() }

// Running returns how many of the links' own goroutines are running.
func (ls *Links) Running() int { return ls.owned.Running() }

// Failures counts the links that ended other than by shutdown.
func (ls *Links) Failures() int64 { return ls.failures.Load() }

// CloseAll closes every dialed link: the calls in flight on them fail now.
func (ls *Links) CloseAll() {
	ls.mu.Lock()
	links := ls.links
	ls.links = map[string]*Link{}
	ls.mu.Unlock()
	for _, l := range links {
		l.close(ErrLinkDown, false)
	}
}

func (ls *Links) now() time.Time { return ls.cfg.Clock() }

func (ls *Links) stopping() bool {
	select {
	case <-ls.cfg.Stop:
		return true
	default:
		return false
	}
}

// cut reports whether Config.Cut cuts this node off from peer.
func (ls *Links) cut(peer string) bool { return ls.cfg.Cut != nil && ls.cfg.Cut(peer) }

// RPCTimeout is Config.RPCTimeout with its default.
func (ls *Links) RPCTimeout() time.Duration {
	if ls.cfg.RPCTimeout > 0 {
		return ls.cfg.RPCTimeout
	}
	return 2 * time.Second
}

// CallTimeout bounds the wait for one request's answer (Call): long
// enough for the nested requests one operation makes (a WRITE_GRANT may
// seal on one host and open on another, each within the RPC timeout),
// since a peer's death is the heartbeat's to detect.
func (ls *Links) CallTimeout() time.Duration { return 3 * ls.RPCTimeout() }

// Dial returns an open link to node, dialing it when needed; nil when
// the node is unknown, down or cannot be reached. It may wait for the
// network: never on a loop.
func (ls *Links) Dial(node string) *Link { return ls.linkTo(node, false) }

// Redial is Dial for a node marked down too, as the heartbeat's redial
// dials: a failure tells no one (the Handler hears no Down), a success
// ends the mark (Directory.Reached with force). It may wait for the
// network: never on a loop.
func (ls *Links) Redial(node string) *Link { return ls.linkTo(node, true) }

// linkTo is Dial; with force it dials even while node is marked down
// (redial: the mark keeps a node out of placement, not out of reach), a
// link made clears the mark, and a failure changes nothing.
func (ls *Links) linkTo(node string, force bool) *Link {
	ls.mu.Lock()
	if l := ls.links[node]; l != nil && !l.closed() {
		ls.mu.Unlock()
		return l
	}
	addr, ok := ls.cfg.Directory.Dialable(node, force)
	if !ok {
		ls.mu.Unlock()
		return nil
	}
	if d := ls.dialing[node]; d != nil {
		// Another goroutine dials the node: wait for its outcome, with no
		// lock held.
		ls.mu.Unlock()
		<-d.done
		return d.l
	}
	d := &dial{done: make(chan struct{})}
	ls.dialing[node] = d
	ls.mu.Unlock()
	l, err := ls.dialLink(node, addr, ls.RPCTimeout())
	ls.mu.Lock()
	delete(ls.dialing, node)
	if err == nil {
		ls.links[node] = l
	}
	ls.mu.Unlock()
	if err == nil {
		ls.cfg.Directory.Reached(node, force)
	}
	d.l = l // nil on failure; read by the waiters after done is closed
	close(d.done)
	if err != nil {
		if !force {
			ls.cfg.Log.Warn("sluice cluster: peer unreachable", "node", node, "err", err)
			ls.cfg.Handler.Down(node)
		}
		return nil
	}
	return l
}

// dial is a dial in progress (Links.dialing): the goroutines that need
// the same node's link wait on done instead of dialing again.
type dial struct {
	done chan struct{}
	l    *Link
}

// Existing returns the open link to node without dialing (for the loops,
// which never wait for the network); nil if there is none.
func (ls *Links) Existing(node string) *Link {
	ls.mu.RLock()
	l := ls.links[node]
	ls.mu.RUnlock()
	if l == nil || l.closed() {
		return nil
	}
	return l
}

// Call sends a NODE_REQUEST of op with body to node, dialing when
// needed, and returns the result of an OK answer (a copy); a refusal is a
// *StatusError. It waits at most CallTimeout. Any goroutine but the
// loops.
func (ls *Links) Call(node string, op wire.NodeOp, body []byte) ([]byte, error) {
	return ls.CallFor(node, op, body, ls.CallTimeout())
}

// CallFor is Call with its own timeout.
func (ls *Links) CallFor(node string, op wire.NodeOp, body []byte, timeout time.Duration) ([]byte, error) {
	l := ls.Dial(node)
	if l == nil {
		return nil, fmt.Errorf("%w: %s unreachable", ErrLinkDown, node)
	}
	return l.CallFor(op, body, timeout)
}

// linkClosed is called once per link when it ends.
func (ls *Links) linkClosed(l *Link, err error) {
	ls.mu.Lock()
	if ls.links[l.node] == l {
		delete(ls.links, l.node)
	}
	ls.mu.Unlock()
	if ls.stopping() {
		return
	}
	ls.failures.Add(1)
	ls.cfg.Log.Warn("sluice cluster: link closed", "node", l.node, "err", err)
	ls.cfg.Handler.Down(l.node)
}
