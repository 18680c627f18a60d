package client

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/sluice-rtm/sluice/wire"
)

// ErrFiltersUnsupported: a subscription with WithFilter was asked of a
// server that does not offer server-side filters (did not accept
// wire.FeatureFilters): Subscribe fails with it and nothing is sent, and
// a filtered subscription whose connection was re-established with such a
// server (another address of the list, a rolling upgrade or downgrade)
// ends with it (Err, Next) instead of resuming without its filter, which
// would deliver every message of the channel. The Conn's other
// subscriptions resume as usual.
var ErrFiltersUnsupported = errors.New("client: server does not offer filters")

// filtersRefused returns the error that ends (or refuses) sub on a session
// with welcome w: ErrFiltersUnsupported for a filtered subscription when
// w lacks FeatureFilters, nil otherwise.
func (sub *Subscription) filtersRefused(w wire.Welcome) error {
	if sub.filter == nil || w.Features&wire.FeatureFilters != 0 {
		return nil
	}
	return fmt.Errorf("%w (server %s): subscription to %q with filter %q", ErrFiltersUnsupported, w.ServerName, sub.channel, sub.filter)
}

// WithFilter makes the subscription receive only the channel's messages
// for which expr, a CEL expression over the message's headers and JSON
// payload, is true (docs/filters.md, PROTOCOL.md 2.17), for example
//
//	headers.type == "trade" && payload.price > 100
//
// The server evaluates it. Messages keep their channel positions: a
// filtered subscription's positions increase with holes where messages
// did not match, and those holes are not gaps (Gap events still report
// what will never come). It resumes after a reconnect from the position
// after the last message delivered, with the same filter. An expression
// the server cannot compile fails Subscribe with a *ServerError
// (INVALID_FILTER); one that does not offer filters fails it with
// ErrFiltersUnsupported, and ends the subscription with it if a reconnect
// lands on such a server.
func WithFilter(expr string) SubOption {
	return func(o *subOptions) error {
		if expr == "" || len(expr) > wire.MaxFilterLen {
			return fmt.Errorf("%w: filter of %d bytes (1..%d)", ErrInvalidOption, len(expr), wire.MaxFilterLen)
		}
		o.filter = []byte(expr)
		return nil
	}
}

// Filter returns the subscription's filter expression, "" for none.
func (sub *Subscription) Filter() string { return string(sub.filter) }

// appendSubscribe encodes sub's SUBSCRIBE: with its presence flags, and
// its filter, if any.
func (sub *Subscription) appendSubscribe(id uint32, sb wire.Subscribe) []byte {
	if sub.filter == nil {
		return wire.AppendSubscribeFlags(nil, id, sub.pflags, sb)
	}
	f := wire.AppendSubscribeFilter(nil, id, sb, string(sub.filter))
	f[5] |= byte(sub.pflags) // the header's flags byte (PROTOCOL.md 1.1), FILTER set already
	return f
}

// onFData handles FDATA: the matching messages of a filtered subscription.
func (s *session) onFData(h wire.Header, body []byte) error {
	if s.welcome.Features&wire.FeatureFilters == 0 {
		return protocolErr("FDATA, but filters were not negotiated")
	}
	_, entries, err := wire.DecodeFData(body)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	if sub := s.sub(h.ID); sub != nil {
		sub.onFData(s, entries)
	}
	return nil
}

// onFData queues the messages of an FDATA frame (copying the entries once)
// or lends them to a SubscribeFunc callback. Positions already delivered
// are dropped; holes between positions are messages that did not match.
func (sub *Subscription) onFData(s *session, entries []byte) {
	if sub.fn != nil {
		sub.inFn.Store(true)
		defer sub.inFn.Store(false)
	}
	cur := sub.cursor.Load()
	blk := entries
	if sub.fn == nil {
		blk = bytes.Clone(entries) // payloads alias it below
	}
	for pos, body, ext, rest, ok := wire.NextFEntry(blk); ok; pos, body, ext, rest, ok = wire.NextFEntry(rest) {
		if cur != 0 && pos < cur {
			continue // duplicate of a delivered position
		}
		var ev Event
		if !sub.messageEvent(&ev, pos, body, ext) {
			return
		}
		if !s.deliver(sub, ev) {
			return
		}
		cur = pos + 1
		sub.cursor.Store(cur)
	}
}
