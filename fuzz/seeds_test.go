package fuzz

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite testdata/fuzz/FuzzServer from the seed table")

// script builds an input for the driver, field by field in the order in
// which driver_test.go reads them.
type script []byte

func (s script) op(o int, fields ...byte) script { return append(append(s, byte(o)), fields...) }
func (s script) u16(v uint16) script             { return binary.BigEndian.AppendUint16(s, v) }
func (s script) u32(v uint32) script             { return binary.BigEndian.AppendUint32(s, v) }

// channel encodes a channel choice: an index into channels, or raw bytes.
func (s script) channel(name string) script {
	for i, c := range channels {
		if c == name {
			return append(s, byte(i))
		}
	}
	return append(append(s, byte(224+len(name))), name...)
}

// hello: version byte (<128 = 1..1), features, name, token length, id.
func (s script) hello(id uint32, v byte, tokenLen uint16) script {
	return s.op(opHello, v, 0, 4, 's', 'e', 'e', 'd').u16(tokenLen).u32(id)
}

// helloF is hello offering features f.
func (s script) helloF(id uint32, f wire.Features) script {
	return s.op(opHello, 0, byte(f), 4, 's', 'e', 'e', 'd').u16(0).u32(id)
}

// hdr is one header of publishExt (key of 1..16 bytes, value < 48).
type hdr struct{ k, v string }

// publishExt: id, flags, channel, id choice (< 128 a shared id, < 192 raw
// bytes, else none), headers, compress, payload.
func (s script) publishExt(id uint32, flags wire.Flags, ch string, idChoice byte, hs []hdr, compress bool, size byte) script {
	s = s.op(opPublishExt).u32(id)
	s = append(s, byte(flags))
	s = s.channel(ch)
	s = append(s, idChoice)
	if idChoice >= 128 && idChoice < 192 {
		s = append(s, "raw-id-bytes-and-more-of-them-for-the-longest-choice-of-sixty-four"[:1+idChoice%64]...)
	}
	s = append(s, byte(len(hs)))
	for _, h := range hs {
		s = append(append(s, byte(len(h.k)-1)), h.k...)
		s = append(append(s, byte(len(h.v))), h.v...)
	}
	c := byte(0)
	if compress {
		c = 1
	}
	s = append(s, c, size)
	return append(s, "pattern!"[:min(8, payloadLen(size))]...)
}

// publish: id, flags, channel, payload (size byte, pattern).
func (s script) publish(id uint32, flags wire.Flags, ch string, size byte) script {
	s = s.op(opPublish).u32(id)
	s = append(s, byte(flags))
	s = s.channel(ch)
	s = append(s, size)
	return append(s, "pattern!"[:min(8, payloadLen(size))]...)
}

func payloadLen(size byte) int {
	if size >= 128 {
		return int(size-128) * 48
	}
	return int(size)
}

// subscribe: id, subID, start kind, arg (< 200), no epoch, channel, no
// presence flags.
func (s script) subscribe(id uint32, subID byte, start wire.StartKind, arg byte, ch string) script {
	return s.subscribeF(id, subID, start, arg, ch, 0)
}

// subscribeF is subscribe with presence flags f.
func (s script) subscribeF(id uint32, subID byte, start wire.StartKind, arg byte, ch string, f wire.Flags) script {
	s = s.op(opSubscribe).u32(id)
	s = append(s, subID, byte(start), arg, 0)
	return append(s.channel(ch), byte(f))
}

// presence: id, flags, channel.
func (s script) presence(id uint32, f wire.Flags, ch string) script {
	s = append(s.op(opPresence).u32(id), byte(f))
	return s.channel(ch)
}

// subFilter: id, subID, start kind, arg (< 200), channel, filter index.
func (s script) subFilter(id uint32, subID byte, start wire.StartKind, arg byte, ch string, filterIdx byte) script {
	s = s.op(opSubFilter).u32(id)
	s = append(s, subID, byte(start), arg)
	return append(s.channel(ch), filterIdx)
}

// refresh: id, token length - 1.
func (s script) refresh(id uint32, tokenLen uint16) script {
	return s.op(opRefresh).u32(id).u16(tokenLen - 1)
}

func (s script) unsubscribe(id uint32, subID byte) script {
	return append(s.op(opUnsub).u32(id), subID)
}

func (s script) ping(id uint32) script { return s.op(opPing).u32(id) }

// raw sends b in chunks of at most 63 bytes.
func (s script) raw(b []byte) script {
	for len(b) > 0 {
		k := min(len(b), 63)
		s = append(s.op(opRaw, byte(k)), b[:k]...)
		b = b[k:]
	}
	return s
}

// anyType sends a frame of type t with flags fl and body (< 64 bytes).
func (s script) anyType(t wire.Type, fl wire.Flags, id uint32, body []byte) script {
	s = s.op(opAnyType, byte(t), byte(fl)).u32(id)
	return append(append(s, byte(len(body))), body...)
}

// huge sends a bare header declaring length n.
func (s script) huge(t wire.Type, n uint32) script {
	return s.op(opHuge, byte(t), 0).u32(7).u32(n)
}

// seed is one committed input: a name (its file name), the script, and
// the fatal code the server must close the first connection with (0: the
// connection stays open).
type seed struct {
	name string
	in   script
	code wire.Code
}

// readHex reads a golden vector of the wire package.
func readHex(tb testing.TB, name string) []byte {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "wire", "testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	var digits strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		line, _, _ = strings.Cut(line, "#")
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return b
}

func seeds(tb testing.TB) []seed {
	var golden []byte
	for _, v := range []string{"hello.hex", "subscribe.hex", "publish.hex", "publish_empty.hex", "ping.hex", "pong.hex", "unsubscribe.hex"} {
		golden = append(golden, readHex(tb, v)...)
	}
	hello := script(nil).hello(1, 0, 0)
	session := hello.subscribe(2, 1, wire.StartLive, 0, "fz.a").publish(3, wire.FlagAck, "fz.a", 5).ping(4).unsubscribe(5, 1)
	tooMany := hello
	for i := range byte(maxSubs + 2) {
		tooMany = tooMany.subscribe(uint32(10+i), i, wire.StartLive, 0, "fz.b")
	}
	trace := []hdr{{"traceparent", "00-0af7651916cd43dd-b7ad6b71-01"}, {"ct", "json"}}
	withHeaders := script(nil).helloF(1, wire.FeatureHeaders)
	withS2 := script(nil).helloF(1, wire.FeatureHeaders|wire.FeatureS2)
	withPresence := script(nil).helloF(1, wire.FeaturePresence)
	// A compressed PUBLISH to "x" whose S2 block declares 1 GiB.
	bomb := append([]byte{1, 'x'}, binary.AppendUvarint(nil, 1<<30)...)
	bomb = append(bomb, 0, 0, 0, 0)
	return []seed{
		// Headers, message ids and S2 (PROTOCOL.md 2.14, 2.15): extended
		// records delivered to a subscriber that negotiated headers, a
		// repeated id answered with the first position, compressed
		// publishes and DATA; a plain subscriber gets the payloads alone.
		// (An id is stored once per server: on later runs against the
		// same server it is a repeat, so the records counted on have none.)
		{"ext-headers-session", withHeaders.subscribe(2, 1, wire.StartLive, 0, "fz.a").
			publishExt(3, wire.FlagAck, "fz.a", 0, trace, false, 5).publishExt(4, wire.FlagAck, "fz.a", 0, trace, false, 5).
			publishExt(5, wire.FlagAck, "fz.a", 130, nil, false, 9).publishExt(6, wire.FlagAck, "fz.a", 255, trace, false, 9).ping(7), 0},
		{"ext-s2-session", withS2.subscribe(2, 1, wire.StartLive, 0, "fz.b").
			publishExt(3, wire.FlagAck, "fz.b", 255, trace, true, 128+20).publishExt(4, wire.FlagAck, "fz.b", 1, trace, true, 40).
			op(opBurst, 47, 1).channel("fz.b").ping(5), 0},
		{"ext-stripped-for-plain", withHeaders.publishExt(2, wire.FlagAck, "fz.hot", 255, trace, false, 7).op(opSwitch, 1).
			hello(1, 0, 0).subscribe(2, 1, wire.StartLast, 3, "fz.hot").ping(3), 0},
		{"refuse-invalid-headers", withHeaders.publishExt(2, wire.FlagAck, "fz.a", 0, []hdr{{"a b", "v"}}, false, 3).
			publishExt(3, wire.FlagAck, "fz.a", 0, []hdr{{"k", "bell\a"}}, false, 3).ping(4), 0},
		{"malformed-ext-without-headers", hello.publishExt(2, wire.FlagAck, "fz.a", 0, trace, false, 3), wire.CodeProtocolError},
		{"malformed-ext-neither", withHeaders.publishExt(2, wire.FlagAck, "fz.a", 255, nil, false, 3), wire.CodeProtocolError},
		{"malformed-compressed-without-s2", withHeaders.publishExt(2, wire.FlagAck, "fz.a", 0, trace, true, 3), wire.CodeProtocolError},
		{"malformed-s2-bomb", withS2.anyType(wire.TypePublish, wire.FlagCompressed|wire.FlagAck, 2, bomb), wire.CodeProtocolError},

		// Presence (PROTOCOL.md 2.18): a watcher that is a member too,
		// queries, a second connection joining (ended, which waits for its
		// answers) and leaving; a
		// query of an invalid channel is refused; without the feature the
		// frame is UNKNOWN_TYPE, and a malformed PRESENCE a PROTOCOL_ERROR.
		{"presence-session", withPresence.subscribeF(2, 1, wire.StartLive, 0, "fz.a", wire.SubscribePresenceFlags).
			presence(3, 0, "fz.a").presence(4, wire.FlagCountsOnly, "fz.b").op(opSwitch, 1).helloF(1, wire.FeaturePresence).
			subscribeF(2, 1, wire.StartLive, 0, "fz.a", wire.FlagPresence).op(opReopen).op(opSwitch, 0).
			presence(5, 0, "fz.a").ping(6), 0},
		{"refuse-presence-invalid-channel", withPresence.presence(2, 0, "a b").ping(3), 0},
		{"malformed-presence-without-feature", hello.presence(2, 0, "fz.a"), wire.CodeUnknownType},
		{"malformed-presence-body", withPresence.anyType(wire.TypePresence, 0, 3, []byte{0}), wire.CodeProtocolError},

		// Valid traffic, and the golden vectors of every client frame.
		{"valid-session", session, 0},
		{"golden-vectors", script(nil).raw(golden), 0},
		{"valid-split-1byte", script(nil).op(opSplit, 1).hello(1, 0, 0).
			subscribe(2, 3, wire.StartEarliest, 0, "fz.hot").publish(3, wire.FlagAck, "fz.hot", 40), 0},
		{"valid-two-conns", hello.subscribe(2, 1, wire.StartLast, 5, "fz.hot").op(opSwitch, 1).hello(1, 0, 0).
			op(opBurst, 47, 1).channel("fz.hot").op(opSwitch, 0).ping(9), 0},
		{"valid-rollover-replay", hello.op(opBurst, 47, 1).channel("fz.hot").op(opBurst, 40, 0).channel("fz.hot").
			subscribe(2, 1, wire.StartEarliest, 0, "fz.hot").subscribe(3, 2, wire.StartSince, 150, "fz.hot"), 0},
		{"valid-reopen", hello.publish(2, 0, "fz.a", 1).op(opReopen).hello(1, 0, 0).ping(3), 0},

		// Non-fatal refusals: the connection carries on.
		{"refuse-invalid-channel", hello.publish(2, wire.FlagAck, "a b", 3).subscribe(3, 1, wire.StartLive, 0, "\x01"), 0},
		{"refuse-payload-too-large", hello.publish(2, wire.FlagAck, "fz.a", 255), 0},
		{"refuse-too-many-subs", tooMany, 0},
		{"refuse-subscription-exists", hello.subscribe(2, 1, 0, 0, "fz.a").subscribe(3, 1, 0, 0, "fz.b"), 0},
		{"refuse-unknown-subscription", hello.unsubscribe(2, 7), 0},
		{"refuse-invalid-start", hello.subscribe(2, 1, wire.StartPosition, 0, "fz.a"), 0},
		{"refuse-expired-start", hello.subscribe(2, 1, wire.StartPosition, 1, "fz.hot"), 0},

		// One seed per malformed class: the server must close.
		{"malformed-before-hello", script(nil).ping(1), wire.CodeHelloRequired},
		{"malformed-version", script(nil).hello(1, 128|2<<2|2, 0), wire.CodeUnsupportedVersion},
		{"refuse-token-too-long", script(nil).hello(1, 0, wire.MaxTokenLen+1), wire.CodeUnauthenticated},
		{"filter-live-and-history", script(nil).helloF(1, wire.FeatureFilters|wire.FeatureHeaders).
			subFilter(2, 1, wire.StartLive, 0, "fz.a", 0).subFilter(3, 2, wire.StartEarliest, 0, "fz.a", 2).
			subFilter(4, 3, wire.StartLive, 0, "fz.a", 3).publish(5, wire.FlagAck, "fz.a", 3).
			publishExt(6, wire.FlagAck, "fz.a", 255, []hdr{{"k", "v"}}, false, 3).unsubscribe(7, 1), 0},
		{"refuse-invalid-filter", script(nil).helloF(1, wire.FeatureFilters).subFilter(2, 1, wire.StartLive, 0, "fz.a", 6).
			subFilter(3, 2, wire.StartLive, 0, "fz.a", 9).ping(4), 0},
		{"malformed-filter-not-negotiated", script(nil).helloF(1, wire.FeatureHeaders).subFilter(2, 1, wire.StartLive, 0, "fz.a", 0), wire.CodeProtocolError},
		{"refresh-without-auth", script(nil).helloF(1, wire.FeatureRefresh).refresh(2, 11).refresh(3, 5000).ping(4), 0},
		{"malformed-refresh-not-negotiated", script(nil).helloF(1, wire.FeatureHeaders).refresh(2, 11), wire.CodeUnknownType},
		{"malformed-second-hello", hello.hello(2, 0, 0), wire.CodeHelloRequired},
		{"malformed-huge-length", hello.huge(wire.TypePublish, 0xFFFFFFFF), wire.CodeFrameTooLarge},
		{"malformed-huge-before-hello", script(nil).huge(wire.TypeHello, serverMaxBody+1), wire.CodeFrameTooLarge},
		{"malformed-unknown-type", hello.anyType(0x20, 0, 1, nil), wire.CodeUnknownType},
		{"malformed-node-type", hello.anyType(0x40, 0, 1, []byte("node")), wire.CodeUnknownType},
		{"malformed-server-type", hello.anyType(wire.TypeWelcome, 0, 1, make([]byte, 40)), wire.CodeUnknownType},
		{"malformed-compressed", hello.publish(2, wire.FlagCompressed|wire.FlagAck, "fz.a", 4), wire.CodeProtocolError},
		{"malformed-ping-body", hello.anyType(wire.TypePing, 0, 3, []byte{1}), wire.CodeProtocolError},
		{"malformed-pong-body", hello.anyType(wire.TypePong, 0, 3, []byte{1, 2, 3}), wire.CodeProtocolError},
		{"malformed-publish-empty-channel", hello.anyType(wire.TypePublish, 0, 3, []byte{0, 'p'}), wire.CodeProtocolError},
		{"malformed-publish-channel-overrun", hello.anyType(wire.TypePublish, 0, 3, []byte{9, 'a', 'b'}), wire.CodeProtocolError},
		{"malformed-subscribe-start", hello.subscribe(2, 1, 5, 0, "fz.a"), wire.CodeProtocolError},
		{"malformed-subscribe-short", hello.anyType(wire.TypeSubscribe, 0, 3, make([]byte, 21)), wire.CodeProtocolError},
		{"malformed-subscribe-long", hello.anyType(wire.TypeSubscribe, 0, 3, append(make([]byte, 21), 1, 'a', 'b')), wire.CodeProtocolError},
		{"malformed-unsubscribe-long", hello.anyType(wire.TypeUnsubscribe, 0, 3, make([]byte, 5)), wire.CodeProtocolError},
		{"malformed-hello-short", script(nil).anyType(wire.TypeHello, 0, 1, []byte{0, 1, 0, 1}), wire.CodeProtocolError},
		{"malformed-garbage", script(nil).raw([]byte("GET / HTTP/1.1\r\nHost: sluice\r\n\r\n")), wire.CodeFrameTooLarge},
		// A PUBLISH of "fz.a" whose channelLen byte (offset 10) is flipped
		// to 0x44: the channel runs past the body.
		{"malformed-mutated", append(hello.op(opMutated, 1).u32(3), 0, 0, 2, 'p', 'q').u16(10).op(0x40), wire.CodeProtocolError},

		// Truncation and EOF: the server must neither hang nor answer.
		// A SUBSCRIBE cut after 20 of its 36 bytes, then EOF.
		{"truncated-then-eof", append(hello.op(opTruncated, 2).u32(9), 1, 0, 0, 0, 0, 0).u16(20).op(opHalfClose), 0},
		// A PUBLISH cut after 30 of its 55 bytes; the harness completes it
		// with zeros before it checks that the connection is alive.
		{"truncated-then-reopen", append(hello.op(opTruncated, 1).u32(9), 0, 0, 40, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h').
			u16(30).op(opReopen).hello(1, 0, 0), 0},
		{"halfclose-after-hello", hello.op(opHalfClose), 0},

		// Regressions: bugs the harness found (see FUZZING.md).
		// HELLO, PUBLISH with ACK and an oversized header in one write:
		// the PUBACK went out after the fatal ERROR.
		{"regress-puback-after-fatal", script(nil).raw(bytes.Join([][]byte{
			wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1}),
			wire.AppendPublish(nil, 2, wire.FlagAck, "x", nil),
			wire.AppendHeader(nil, wire.TypePing, 0, 3, 1<<30),
		}, nil)), wire.CodeFrameTooLarge},
		// The same with publishes batched into runs: a run not yet
		// appended when a COMPRESSED frame ended the connection.
		{"regress-puback-before-compressed", script(nil).raw(bytes.Join([][]byte{
			wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1}),
			wire.AppendPublish(nil, 2, wire.FlagAck, "x", nil),
			wire.AppendPublish(nil, 3, wire.FlagAck|wire.FlagCompressed, "x", nil),
		}, nil)), wire.CodeProtocolError},
		// A PONG with a body was ignored instead of closing the connection.
		{"regress-pong-body", hello.anyType(wire.TypePong, 0, 0, []byte{0}), wire.CodeProtocolError},
		// PUBLISH with COMPRESSED was stored instead of closing the connection.
		{"regress-compressed-publish", hello.publish(2, wire.FlagCompressed, "fz.b", 9), wire.CodeProtocolError},
	}
}

// streamSeed is one committed input of FuzzServerBytes.
type streamSeed struct {
	name         string
	stream, cuts []byte
}

func streamSeeds(tb testing.TB) []streamSeed {
	var golden []byte // every client frame but HELLO (the harness sends one)
	for _, v := range []string{"subscribe.hex", "publish.hex", "publish_empty.hex", "ping.hex", "pong.hex", "unsubscribe.hex"} {
		golden = append(golden, readHex(tb, v)...)
	}
	helloFrame := readHex(tb, "hello.hex")
	publish := wire.AppendPublish(nil, 5, wire.FlagAck, "fz.a", []byte("split me"))
	return []streamSeed{
		{"golden-whole", golden, nil},
		{"golden-1byte", golden, []byte{0}},
		{"golden-mixed-cuts", golden, []byte{2, 9, 0, 4, 63, 12}},
		{"golden-own-hello", append(append([]byte(nil), helloFrame...), golden...), []byte{1, 5}},
		{"malformed-huge-length", append(append([]byte(nil), golden[:30]...), 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0, 0, 1), nil},
		{"malformed-length-split", []byte{0, 0, 0x7f, 0xff, 3, 0, 0, 0, 0, 1}, []byte{0, 1}},
		{"malformed-unknown-type", []byte{0, 0, 0, 0, 0x33, 0, 0, 0, 0, 9}, nil},
		{"malformed-no-hello", publish, []byte{1}},
		{"truncated-tail", append(append([]byte(nil), golden...), golden[:17]...), []byte{6}},
		// Regression: a read that ends inside the first frame of a
		// callback made the engine call gnet's Discard(0), which drops
		// everything buffered, and the stream lost its framing.
		{"regress-discard-zero", bytes.Repeat(publish, 3), []byte{2}},
	}
}

// seedFile renders the arguments of one fuzz input in the corpus file
// format of go test.
func seedFile(args ...[]byte) []byte {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, a := range args {
		fmt.Fprintf(&b, "[]byte(%q)\n", a)
	}
	return []byte(b.String())
}

// corpusFiles lists every committed seed of this package's targets.
func corpusFiles(tb testing.TB) map[string][]byte {
	files := make(map[string][]byte)
	for _, s := range seeds(tb) {
		files[filepath.Join("testdata", "fuzz", "FuzzServer", s.name)] = seedFile(s.in)
	}
	for _, s := range streamSeeds(tb) {
		files[filepath.Join("testdata", "fuzz", "FuzzServerBytes", s.name)] = seedFile(s.stream, s.cuts)
	}
	return files
}

// TestSeedCorpus keeps testdata/fuzz/FuzzServer and FuzzServerBytes in
// step with the seed tables (run with -update-seeds to rewrite them).
// Files not in the tables, such as the fuzzer's own finds, are left alone.
func TestSeedCorpus(t *testing.T) {
	for path, want := range corpusFiles(t) {
		if *updateSeeds {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is missing or stale (%v): run go test ./fuzz -run TestSeedCorpus -update-seeds", path, err)
		}
	}
}

// TestSeedOutcomes runs every seed against the live server and checks the
// outcome its name promises: refusals and valid traffic keep the first
// connection open, each malformed class closes it with its code. Together
// with the model checks inside runInput, this is the per-class regression
// test.
func TestSeedOutcomes(t *testing.T) {
	addr := server(t)
	for _, s := range seeds(t) {
		t.Run(s.name, func(t *testing.T) {
			d, err := runInput(addr, s.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.ended) == 0 {
				t.Fatal("no connection")
			}
			o := d.ended[0]
			switch {
			case s.code == 0 && (o.fatal != nil || o.model.closed):
				t.Fatalf("connection closed with %v (model: %s), want it open", o.fatal, o.model.why)
			case s.code != 0 && (!o.model.closed || !o.model.allows(s.code)):
				t.Fatalf("the model predicts closed=%v with %v, want a close with %v", o.model.closed, o.model.codes, s.code)
			case s.code != 0 && o.fatal == nil:
				t.Fatalf("connection ended without a fatal ERROR, want %v", s.code)
			case s.code != 0 && o.fatal.Code != s.code && !o.model.allows(o.fatal.Code):
				t.Fatalf("connection ended with %v, want %v", o.fatal, s.code)
			}
			// The sessions with headers and S2 deliver what they promise
			// (outCheck checked each record of each DATA).
			switch last := d.ended[len(d.ended)-1]; {
			case s.name == "ext-headers-session" && o.exts == 0:
				t.Fatal("no extended record delivered")
			case s.name == "ext-s2-session" && (o.zdata == 0 || o.exts == 0):
				t.Fatalf("%d compressed DATA, %d extended records: want both", o.zdata, o.exts)
			case s.name == "ext-stripped-for-plain" && (last.data == 0 || last.exts != 0):
				t.Fatalf("the plain subscriber got %d DATA with %d extended records", last.data, last.exts)
			case s.name == "presence-session" && last.pres < 1:
				// Its first OCCUPANCY follows SUBSCRIBED at once; the join
				// reaches its loop by a task, which may come after the
				// harness's last sync (engine's presence tests check it).
				t.Fatalf("the watcher got %d presence frames, want at least its first occupancy", last.pres)
			}
			if err := probe(addr); err != nil {
				t.Fatal(err)
			}
		})
	}
}
