package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// TokenProvider returns the credentials to present to the server: called
// before every connection attempt (HELLO), and on an open connection
// shortly before its token expires (REFRESH, PROTOCOL.md 2.16). It is
// typically a call to the application's backend, which mints a fresh JWT
// for the user (docs/auth.md). ctx ends when the connection attempt or
// the connection does. It is called from one goroutine at a time.
type TokenProvider func(ctx context.Context) ([]byte, error)

// WithTokenProvider makes the Conn get its token from p instead of a fixed
// WithToken: at every (re)connection, and, when the server says the token
// expires, again at a random point between 80% and 90% of its lifetime,
// sent on the open connection without interrupting anything. A token the
// server refuses on refresh ends the connection, and the reconnect asks p
// again; if p fails, the connection attempt fails (and is retried with
// backoff), or on refresh p is asked again after a while, until the
// server's grace period after the expiry runs out.
func WithTokenProvider(p TokenProvider) Option {
	return func(o *options) error {
		if p == nil {
			return fmt.Errorf("%w: nil token provider", ErrInvalidOption)
		}
		o.provider = p
		return nil
	}
}

// helloToken returns the token for the next HELLO.
func (c *Conn) helloToken(ctx context.Context) ([]byte, error) {
	if c.opts.provider == nil {
		return c.opts.token, nil
	}
	tok, err := c.opts.provider(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: token provider: %w", err)
	}
	if len(tok) > wire.MaxTokenLen {
		return nil, fmt.Errorf("%w: the token provider returned %d bytes, at most %d", ErrInvalidOption, len(tok), wire.MaxTokenLen)
	}
	return tok, nil
}

// ClientID returns the id the server knows this client by (a JWT's sub,
// or a static token's configured name), as its last AUTHED said; "" when
// there is none or the server did not say. Safe for concurrent use.
func (c *Conn) ClientID() string {
	if s := c.cur.Load(); s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.clientID
	}
	return ""
}

// TokenRefreshes returns how many REFRESHes the server accepted over the
// Conn's life. Safe for concurrent use.
func (c *Conn) TokenRefreshes() uint64 { return c.refreshes.Load() }

// refreshRetry bounds the wait before asking a failed provider again.
const refreshRetry = 5 * time.Second

// onAuthed handles AUTHED: after WELCOME or answering this session's
// REFRESH. It records the client id and, with a token provider, schedules
// the next refresh.
func (s *session) onAuthed(h wire.Header, body []byte) error {
	a, err := wire.DecodeAuthed(body)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	if s.welcome.Features&wire.FeatureRefresh == 0 {
		return protocolErr("AUTHED, but REFRESH was not negotiated")
	}
	s.mu.Lock()
	s.clientID = a.ClientID
	if h.ID != 0 && h.ID == s.refreshID {
		s.refreshID = 0
		s.c.refreshes.Add(1)
	}
	s.mu.Unlock()
	if a.ExpiresIn > 0 && s.c.opts.provider != nil {
		// 80% to 90% of the lifetime, so that clients given tokens at the
		// same time do not all come back at once.
		s.scheduleRefresh(time.Duration(float64(a.ExpiresIn)*0.8 + rand.Float64()*float64(a.ExpiresIn)/10))
	}
	return nil
}

// scheduleRefresh arms the session's refresh timer to fire after d. The
// timer's function runs on its own goroutine, owned by the session: fail
// stops the timer and cancels the provider call of a running one.
func (s *session) scheduleRefresh(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return
	}
	if s.refreshT != nil {
		s.refreshT.Stop()
	}
	s.refreshT = time.AfterFunc(d, s.refresh)
}

// refresh asks the provider for a token and sends it in a REFRESH; when
// the provider fails, it tries again later.
func (s *session) refresh() {
	tok, err := s.c.helloToken(s.ctx)
	if err != nil {
		s.c.log.Warn("token refresh failed; trying again", "err", err)
		s.scheduleRefresh(refreshRetry)
		return
	}
	id := s.c.nextReq()
	s.mu.Lock()
	if !s.dead {
		s.refreshID = id
		s.wbuf = wire.AppendRefresh(s.wbuf, id, tok)
	}
	s.mu.Unlock()
	s.kick()
}
