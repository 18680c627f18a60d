package fuzz

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-rtm/sluice/wire"
)

// An input is a sequence of actions. Each action starts with a byte that
// picks the operation; the following bytes are its fields. Past the end of
// the input every field reads as zero, so any byte string is an input.
const (
	opHello      = iota // a valid HELLO with fuzzer-chosen versions, features, name, token
	opPublish           // a PUBLISH: flags, channel, payload (maybe over maxPayload)
	opSubscribe         // a SUBSCRIBE: subID, start kind (maybe undefined), arg, epoch, channel
	opUnsub             // an UNSUBSCRIBE of a fuzzer-chosen subID
	opPing              // a PING
	opPong              // a PONG (nobody asked for it)
	opRaw               // up to 63 raw fuzzer bytes
	opTruncated         // a valid frame cut at a fuzzer-chosen length
	opHuge              // a bare header declaring a fuzzer-chosen (often huge) length
	opMutated           // a valid frame with one byte changed
	opReopen            // end the current connection and judge it; the next write opens a new one
	opSwitch            // switch between two concurrent connections
	opSplit             // write in pieces of 1..32 bytes from now on (0 = whole)
	opAnyType           // a frame of any type, flags and id with a fuzzer body
	opHalfClose         // close the sending side (the server sees EOF)
	opBurst             // 1..48 small PUBLISHes to one channel
	opPublishExt        // a PUBLISH with EXT: message id and headers (maybe invalid), maybe COMPRESSED
	opPresence          // a PRESENCE query: flags, channel
	opSubFilter         // a SUBSCRIBE with FILTER and an expression (valid or not)
	opRefresh           // a REFRESH with a token of 0..4,200 bytes
	numOps
)

// opNames names the operations in failure reports.
var opNames = [numOps]string{"hello", "publish", "subscribe", "unsubscribe", "ping", "pong", "raw",
	"truncated", "huge", "mutated", "reopen", "switch", "split", "anytype", "halfclose", "burst", "publishext", "presence",
	"subfilter", "refresh"}

// Bounds that keep one input fast (milliseconds).
const (
	maxActions = 96
	maxBytes   = 512 << 10
)

// channels are the names most actions use, so that publishes and
// subscriptions of one input (and of successive inputs) meet.
var channels = [...]string{"fz.a", "fz.b", "fz.hot", "x", "fz/ü"}

// src hands out fuzzer bytes as fields; past the end it yields zeros.
type src struct{ b []byte }

func (s *src) empty() bool { return len(s.b) == 0 }

func (s *src) u8() uint8 {
	if len(s.b) == 0 {
		return 0
	}
	v := s.b[0]
	s.b = s.b[1:]
	return v
}

func (s *src) u16() uint16 { return uint16(s.u8())<<8 | uint16(s.u8()) }
func (s *src) u32() uint32 { return uint32(s.u16())<<16 | uint32(s.u16()) }
func (s *src) u64() uint64 { return uint64(s.u32())<<32 | uint64(s.u32()) }

// n returns the next k bytes (fewer at the end), copied.
func (s *src) n(k int) []byte {
	k = min(k, len(s.b))
	out := append([]byte(nil), s.b[:k]...)
	s.b = s.b[k:]
	return out
}

// id returns a request id; ids with the top bit set are the harness's.
func (s *src) id() uint32 { return s.u32() &^ 0x80000000 }

// channel mostly picks a shared valid name, sometimes raw bytes (possibly
// empty, invalid UTF-8, with spaces or control characters).
func (s *src) channel() string {
	c := s.u8()
	if c < 224 {
		return channels[int(c)%len(channels)]
	}
	return string(s.n(int(c - 224)))
}

// payload is mostly small, sometimes up to 6 KiB (over maxPayload), filled
// with a fuzzer-chosen pattern.
func (s *src) payload() []byte {
	b := s.u8()
	n := int(b)
	if b >= 128 {
		n = int(b-128) * 48
	}
	pat := s.n(min(n, 8))
	p := make([]byte, n)
	for i := range p {
		if len(pat) > 0 {
			p[i] = pat[i%len(pat)]
		} else {
			p[i] = 'p'
		}
	}
	return p
}

// arg is a subscription argument: mostly small (counts, milliseconds,
// positions below every retained one), sometimes any u64.
func (s *src) arg() uint64 {
	if b := s.u8(); b < 200 {
		return uint64(b)
	}
	return s.u64()
}

func (s *src) hello() []byte {
	h := wire.Hello{MinVersion: 1, MaxVersion: 1}
	if v := s.u8(); v >= 128 {
		h.MinVersion, h.MaxVersion = uint16(v&3), uint16(v>>2&3)
	}
	// Any feature bits: the server accepts headers and S2 when offered
	// (the model follows) and must ignore the others.
	h.Features = wire.Features(s.u8())
	h.Name = string(s.n(int(s.u8() % 32)))
	h.Token = make([]byte, int(s.u16())%4200) // over 4096 is malformed
	return wire.AppendHello(nil, s.id(), h)
}

func (s *src) publish() []byte {
	id, flags, ch := s.id(), wire.Flags(s.u8()), s.channel()
	return wire.AppendPublish(nil, id, flags, ch, s.payload())
}

// ids are the message ids publishExt mostly uses, so that repeats meet
// the dedup window.
var ids = [...]string{"id-0", "id-1", "order-17"}

// publishExt is a PUBLISH with flag EXT: an extended record body with a
// message id (a shared one, fuzzer bytes, or none) and 0..3 headers whose
// keys and values are fuzzer bytes (so often invalid), or an ext-flags byte
// of 0 when it has neither (malformed); compressed as one S2 block when
// the fuzzer says so (valid only after S2 was negotiated).
func (s *src) publishExt() []byte {
	id, flags, ch := s.id(), wire.Flags(s.u8())&wire.FlagAck|wire.FlagExt, s.channel()
	var mid []byte
	switch c := s.u8(); {
	case c < 128:
		mid = []byte(ids[int(c)%len(ids)])
	case c < 192:
		mid = s.n(1 + int(c%64))
	}
	var hs []wire.HeaderField
	for range s.u8() % 4 {
		k := s.n(1 + int(s.u8()%16))
		if len(k) == 0 {
			k = []byte("k")
		}
		hs = append(hs, wire.HeaderField{Key: string(k), Value: string(s.n(int(s.u8() % 48)))})
	}
	compress := s.u8()&1 == 1
	payload := s.payload()
	body := []byte{0} // neither: malformed
	if len(mid) > 0 || len(hs) > 0 {
		body = wire.AppendExt(nil, mid, hs, payload)
	}
	if compress {
		f, _ := wire.AppendPublishS2(nil, id, flags, ch, body, nil)
		return f
	}
	f := wire.AppendHeader(nil, wire.TypePublish, flags, id, 1+len(ch)+len(body))
	f = append(append(append(f, byte(len(ch))), ch...), body...)
	return f
}

func (s *src) subscribe() []byte {
	id := s.id()
	sb := wire.Subscribe{SubID: uint32(s.u8() % 12), Start: wire.StartKind(s.u8() % 6), Arg: s.arg()}
	if s.u8()&1 == 1 {
		sb.Epoch = s.u64()
	}
	sb.Channel = []byte(s.channel())
	// The presence flags (meaningful after FeaturePresence, ignored
	// before).
	return wire.AppendSubscribeFlags(nil, id, wire.Flags(s.u8())&wire.SubscribePresenceFlags, sb)
}

// presence is a PRESENCE query with fuzzer flags (COUNTS_ONLY and
// undefined bits) and channel.
func (s *src) presence() []byte {
	id, flags := s.id(), wire.Flags(s.u8())&^wire.FlagCompressed
	ch := s.channel()
	if ch == "" || len(ch) > wire.MaxChannelLen {
		ch = "x"
	}
	return wire.AppendPresence(nil, id, flags, ch)
}

// frame builds one valid client frame of a fuzzer-chosen type.
func (s *src) frame() []byte {
	switch s.u8() % 8 {
	case 0:
		return s.hello()
	case 1:
		return s.publish()
	case 2:
		return s.subscribe()
	case 3:
		return wire.AppendUnsubscribe(nil, s.id(), uint32(s.u8()%12))
	case 4:
		return wire.AppendPing(nil, s.id())
	case 5:
		return s.publishExt()
	case 6:
		return s.presence()
	default:
		return wire.AppendPong(nil, s.id())
	}
}

// driver runs one input against the server at addr.
type driver struct {
	addr   string
	conns  [2]*fconn
	cur    int
	split  int
	sent   int // bytes written
	frames int // frames and raw chunks written
	errs   []error
	ended  []outcome
	trace  []string // the operations performed, for failure reports
}

// outcome is how one connection of an input ended.
type outcome struct {
	model model       // what the protocol required
	fatal *wire.Error // the fatal ERROR or GOAWAY the server sent
	// What the connection received: DATA frames, compressed ones, and
	// extended records in them.
	data, zdata, exts int
	pres              int // PRESENCE_EVENT and OCCUPANCY frames
}

// runInput decodes data into actions and performs them on fresh
// connections, then judges every connection (fconn.finish). It returns the
// finished driver (d.ended says how each connection ended, in order;
// d.frames how many frames were written) and every broken rule.
func runInput(addr string, data []byte) (*driver, error) {
	d := &driver{addr: addr}
	s := &src{b: data}
	for i := 0; i < maxActions && !s.empty() && d.sent < maxBytes && len(d.errs) == 0; i++ {
		d.action(s)
	}
	for i := range d.conns {
		d.end(i)
	}
	if len(d.errs) > 0 {
		return d, fmt.Errorf("after actions [%s]: %w", strings.Join(d.trace, " "), errors.Join(d.errs...))
	}
	return d, nil
}

// conn returns the current connection, opening it if needed.
func (d *driver) conn() *fconn {
	if d.conns[d.cur] == nil {
		fc, err := dialF(d.addr)
		if err != nil {
			d.errs = append(d.errs, fmt.Errorf("dial: %w", err))
			return nil
		}
		fc.split = d.split
		d.conns[d.cur] = fc
	}
	return d.conns[d.cur]
}

func (d *driver) write(b []byte) {
	if fc := d.conn(); fc != nil {
		fc.write(b)
		d.sent += len(b)
		d.frames++
	}
}

// end judges and closes connection i.
func (d *driver) end(i int) {
	if fc := d.conns[i]; fc != nil {
		if err := fc.finish(); err != nil {
			d.errs = append(d.errs, fmt.Errorf("connection %d: %w", i, err))
		}
		d.ended = append(d.ended, outcome{model: fc.m, fatal: fc.oc.fatal, data: fc.oc.data, zdata: fc.oc.zdata, exts: fc.oc.exts, pres: fc.oc.presFrames})
		d.conns[i] = nil
	}
}

func (d *driver) action(s *src) {
	op := s.u8() % numOps
	d.trace = append(d.trace, fmt.Sprintf("%d:%s", d.cur, opNames[op]))
	switch op {
	case opHello:
		d.write(s.hello())
	case opPublish:
		d.write(s.publish())
	case opSubscribe:
		d.write(s.subscribe())
	case opUnsub:
		d.write(wire.AppendUnsubscribe(nil, s.id(), uint32(s.u8()%12)))
	case opPing:
		d.write(wire.AppendPing(nil, s.id()))
	case opPong:
		d.write(wire.AppendPong(nil, s.id()))
	case opRaw:
		d.write(s.n(int(s.u8() % 64)))
	case opTruncated:
		f := s.frame()
		d.write(f[:int(s.u16())%len(f)])
	case opHuge:
		d.write(wire.AppendHeader(nil, wire.Type(s.u8()), wire.Flags(s.u8()), s.u32(), int(s.u32())))
	case opMutated:
		f := s.frame()
		i := int(s.u16()) % len(f)
		f[i] ^= s.u8() | 1
		d.write(f)
	case opReopen:
		d.end(d.cur)
	case opSwitch:
		d.cur = int(s.u8() % 2)
	case opSplit:
		d.split = int(s.u8() % 33)
		if fc := d.conns[d.cur]; fc != nil {
			fc.split = d.split
		}
	case opAnyType:
		t, fl, id := wire.Type(s.u8()), wire.Flags(s.u8()), s.u32()
		body := s.n(int(s.u8() % 64))
		if sb, _, err := wire.DecodeSubscribeFilter(body); err == nil && t == wire.TypeSubscribe && fl&wire.FlagFilter != 0 {
			d.markFiltered(sb.SubID)
		}
		d.write(append(wire.AppendHeader(nil, t, fl, id, len(body)), body...))
	case opHalfClose:
		if fc := d.conn(); fc != nil {
			fc.halfClose()
		}
	case opBurst:
		n := 1 + int(s.u8()%48)
		flags, ch := wire.Flags(s.u8()&1), s.channel()
		var b []byte
		for i := range n {
			b = wire.AppendPublish(b, uint32(i+1), flags, ch, []byte(fmt.Sprintf("burst %d", i)))
		}
		d.write(b)
		d.frames += n - 1
	case opPublishExt:
		d.write(s.publishExt())
	case opPresence:
		d.write(s.presence())
	case opSubFilter:
		f, sub := s.subscribeFilter()
		d.markFiltered(sub)
		d.write(f)
	case opRefresh:
		tok := make([]byte, 1+int(s.u16())%4200) // over 4,096 is refused only with auth on
		d.write(wire.AppendRefresh(nil, s.id(), tok))
	}
}

// markFiltered tells the current connection's reader, before the frame
// goes out, that subscription sub may be a filtered one: its FDATA and
// GAPs leave holes between positions (PROTOCOL.md 2.17).
func (d *driver) markFiltered(sub uint32) {
	if fc := d.conn(); fc != nil {
		fc.oc.filtered.Store(sub, true)
	}
}

// filters are the expressions opSubFilter picks: valid ones that select
// some of the fuzzer's messages, and ones the server must refuse.
var filters = [...]string{
	`payload == null`, `size(payload) > 1`, `"k" in headers`, `true`,
	`headers.k == "v" || payload.x > 1`, `payload.a.exists(x, x > 2)`,
	`payload +`, `1 + 2`, `nosuch == 1`, "\xff",
}

// subscribeFilter is a SUBSCRIBE with FILTER of a shared subscription
// id, channel and start, with one of filters; it returns the subID too.
func (s *src) subscribeFilter() ([]byte, uint32) {
	id := s.id()
	sb := wire.Subscribe{SubID: uint32(s.u8() % 12), Start: wire.StartKind(s.u8() % 5), Arg: s.arg(), Channel: []byte(s.channel())}
	return wire.AppendSubscribeFilter(nil, id, sb, filters[int(s.u8())%len(filters)]), sb.SubID
}
