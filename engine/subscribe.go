package engine

import (
	"fmt"
	"time"

	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// startPosition resolves a SUBSCRIBE start against the channel's state at
// now (unix ns). It is pure apart from reading stamps of hosted streamlets
// for StartSince.
func (srv *Server) startPosition(sb wire.Subscribe, info *role.ChannelInfo, now int64) uint64 {
	switch sb.Start {
	case wire.StartEarliest:
		return info.Earliest
	case wire.StartPosition:
		if sb.Epoch != 0 && sb.Epoch != info.Epoch {
			// The position is of another incarnation: this one numbers
			// from 1, and is delivered from there (what of it is no
			// longer retained gets a GAP).
			return 1
		}
		return sb.Arg
	case wire.StartLast:
		if info.Next-info.Earliest <= sb.Arg {
			return info.Earliest
		}
		return info.Next - sb.Arg
	case wire.StartSince:
		back := time.Duration(min(sb.Arg, uint64(1<<62)/uint64(time.Millisecond))) * time.Millisecond
		return srv.positionSince(string(sb.Channel), info, now-int64(back))
	default: // wire.StartLive
		return info.Next
	}
}

// positionSince returns the first retained position published at or after
// t (unix ns), or info.Next when there is none.
func (srv *Server) positionSince(channel string, info *role.ChannelInfo, t int64) uint64 {
	for _, ref := range info.Streamlets {
		if ref.Lost {
			continue
		}
		s := srv.streamletFor(channel, ref)
		if s == nil || !s.Buf().Acquire() {
			continue
		}
		n := s.Buf().Len()
		if n > 0 && s.Buf().Stamp(n-1) >= t {
			i := s.Buf().SearchStamp(t)
			s.Buf().Release()
			return s.First() + uint64(i)
		}
		s.Buf().Release()
	}
	return info.Next
}

// subscribe handles SUBSCRIBE with its flags; filter is its expression (nil: none).
func (l *loop) subscribe(c *conn, reqID uint32, flags wire.Flags, sb wire.Subscribe, filter []byte) {
	srv := l.srv
	if err := wire.ValidChannel(sb.Channel); err != nil {
		c.sendError(reqID, wire.CodeInvalidChannel, err.Error())
		return
	}
	if !l.allowSubscribe(c, reqID, sb.Channel, sb.Start) {
		return
	}
	pflags, ok := l.presenceFlags(c, reqID, flags, sb.Channel)
	if !ok {
		return
	}
	if len(c.subs) >= srv.opts.MaxSubsPerConn {
		c.sendError(reqID, wire.CodeTooManySubscriptions,
			fmt.Sprintf("at most %d subscriptions per connection", srv.opts.MaxSubsPerConn))
		return
	}
	if c.subs[sb.SubID] != nil {
		c.sendError(reqID, wire.CodeSubscriptionExists, fmt.Sprintf("subscription %d exists", sb.SubID))
		return
	}
	if sb.Start == wire.StartPosition && sb.Arg == 0 {
		c.sendError(reqID, wire.CodeInvalidStart, "positions start at 1")
		return
	}
	lc := l.channel(string(sb.Channel))
	lc.lastUse = l.now
	var sf *sharedFilter
	if filter != nil {
		var code wire.Code
		var err error
		if sf, code, err = srv.acquireFilter(lc.gc, string(filter)); err != nil {
			c.sendError(reqID, code, err.Error())
			return
		}
	}
	// The channel's manager may be a peer: the control plane answers off
	// the loop (a loop never waits for the network) or inline, and the
	// SUBSCRIBE continues here. The subscription id is taken now, so that
	// the frames that follow on the connection see it.
	sb.Channel = append([]byte(nil), sb.Channel...) // may outlive gnet's buffer
	su := &sub{c: c, id: sb.SubID, lc: lc, pending: true, pflags: pflags, sf: sf}
	c.subs[sb.SubID] = su
	lc.pendingSubs++
	srv.plane.info(lc, true, func(info role.ChannelInfo, _ bool, err error) {
		lc.pendingSubs--
		if c.closed || c.closing || c.subs[su.id] != su {
			su.dropFilter()
			return
		}
		su.pending = false
		if err != nil {
			// No answer is no channel state: starting at the zero info's
			// position 0 would tell the subscriber that every position
			// below the channel's first had expired. The client retries
			// (the SDK does for a resubscribe).
			delete(c.subs, su.id)
			su.dropFilter()
			c.sendError(reqID, wire.CodeUnavailable, fmt.Sprintf("channel %q: lookup failed: %v", sb.Channel, err))
			if su.cancel {
				l.unsubscribe(c, su.cancelReq, su.id) // UNKNOWN_SUBSCRIPTION: it never began
			}
			return
		}
		l.subscribeWith(c, reqID, sb, lc, su, info)
		if su.cancel {
			l.unsubscribe(c, su.cancelReq, su.id)
		}
	})
}

// subscribeWith completes SUBSCRIBE with the channel's info.
func (l *loop) subscribeWith(c *conn, reqID uint32, sb wire.Subscribe, lc *loopChan, su *sub, info role.ChannelInfo) {
	srv := l.srv
	if lc.nsubs == 0 {
		lc.live = cursor{pos: info.Next}
	}
	if !l.presenceJoin(c, reqID, lc, su) {
		delete(c.subs, su.id)
		return
	}
	start := srv.startPosition(sb, &info, l.now)
	first := max(start, info.Earliest)
	s, k := c.ownStart()
	c.scratch = wire.AppendSubscribed(c.scratch, reqID, wire.Subscribed{
		SubID: sb.SubID, First: first, Earliest: info.Earliest, Next: info.Next, Epoch: info.Epoch,
	})
	c.ownEnd(s, k)
	if start < first {
		reason := wire.GapExpired
		if sb.Epoch != 0 && sb.Epoch != info.Epoch {
			reason = wire.GapLost
		}
		c.sendGap(sb.SubID, start, first-1, reason)
	}
	c.subs[sb.SubID] = su
	if su.sf != nil {
		lc.joinGroup(su, su.sf)
		su.sf = nil
	}
	lc.addSub(su, first)
	l.presenceAdded(c, lc, su)
	switch {
	case su.fg != nil && first < lc.live.pos:
		lc.deliverGroups()
	case su.fg == nil && first != lc.live.pos:
		lc.deliverCatchup()
	}
}

func (l *loop) unsubscribe(c *conn, reqID, subID uint32) {
	su := c.subs[subID]
	if su == nil {
		c.sendError(reqID, wire.CodeUnknownSubscription, fmt.Sprintf("no subscription %d", subID))
		return
	}
	if su.pending {
		// SUBSCRIBED is not sent yet: answer both in order when it is.
		su.cancel, su.cancelReq = true, reqID
		return
	}
	delete(c.subs, subID)
	su.lc.removeSub(su)
	s, k := c.ownStart()
	c.scratch = wire.AppendUnsubscribed(c.scratch, reqID, subID)
	c.ownEnd(s, k)
}
