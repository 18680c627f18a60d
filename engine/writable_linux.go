//go:build linux

package engine

import (
	"github.com/sluice-rtm/sluice/internal/owned"
	"sync"

	"golang.org/x/sys/unix"
)

// writeWatch tells loops when a connection whose socket was full can take
// bytes again. gnet drains its outbound buffer when the socket becomes
// writable but tells its handler nothing, and polling waiting subscribers
// on a timer costs CPU for as long as their sockets stay full. So a
// connection whose output passed the outbound limit is registered here,
// in an epoll set of the server's own (EPOLLOUT, one-shot), and one
// goroutine, blocked in epoll_wait while nothing happens, hands each
// writable event to the connection's loop (conn.writable).
//
// arm and forget are called on the connection's loop; the goroutine only
// reads the token table under mu and calls loop.execute.
type writeWatch struct {
	epfd  int
	efd   int // eventfd with token 0: written by close to end the goroutine
	mu    sync.Mutex
	next  uint32
	conns map[uint32]*conn // by token; guarded by mu
	done  chan struct{}
}

func newWriteWatch(cnt *owned.Count) (*writeWatch, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: 0}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, efd, &ev); err != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(efd)
		return nil, err
	}
	w := &writeWatch{epfd: epfd, efd: efd, conns: make(map[uint32]*conn), done: make(chan struct{})}
	cnt.Go(w.run, func() { close(w.done) })
	return w, nil
}

func (w *writeWatch) run() {
	evs := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(w.epfd, evs, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range evs[:n] {
			tok := uint32(ev.Fd)
			if tok == 0 {
				return // close
			}
			w.mu.Lock()
			c := w.conns[tok]
			w.mu.Unlock()
			if c != nil {
				c.l.execute(c.writable) // c.l never changes
			}
		}
	}
}

// arm asks for one call of c.writable on c's loop when c's socket can take
// bytes. It reports false when the socket cannot be watched; the caller
// then falls back to a timer.
func (w *writeWatch) arm(c *conn) bool {
	op := unix.EPOLL_CTL_MOD
	if c.watchTok == 0 {
		w.mu.Lock()
		for w.next++; w.next == 0 || w.conns[w.next] != nil; w.next++ {
		}
		c.watchTok = w.next
		w.conns[c.watchTok] = c
		w.mu.Unlock()
		op = unix.EPOLL_CTL_ADD
	}
	ev := unix.EpollEvent{Events: unix.EPOLLOUT | unix.EPOLLONESHOT, Fd: int32(c.watchTok)}
	err := unix.EpollCtl(w.epfd, op, c.gc.Fd(), &ev)
	if err == unix.EEXIST {
		err = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_MOD, c.gc.Fd(), &ev)
	}
	return err == nil
}

// forget unregisters c; called from gnet's OnClose, while c's descriptor
// is still open (so it cannot name another connection yet).
func (w *writeWatch) forget(c *conn) {
	if c.watchTok == 0 {
		return
	}
	_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, c.gc.Fd(), nil)
	w.mu.Lock()
	delete(w.conns, c.watchTok)
	w.mu.Unlock()
	c.watchTok = 0
}

// close ends the goroutine; no loop may call arm afterwards.
func (w *writeWatch) close() {
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	_, _ = unix.Write(w.efd, one)
	<-w.done
	_ = unix.Close(w.epfd)
	_ = unix.Close(w.efd)
}
