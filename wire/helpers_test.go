package wire_test

import (
	"fmt"

	"github.com/sluice-rtm/sluice/wire"
)

// This file holds the test-side model of a decoded frame, shared by the unit
// tests, the golden tests and the fuzz targets.

// msg is one decoded frame: its header and a comparable value.
type msg struct {
	H wire.Header
	V any
}

// Test-side value types for frames whose decoders return several values.
type (
	publishMsg struct{ Channel, Payload string }
	dataMsg    struct {
		First    uint64
		Payloads []string
	}
	unsubMsg   uint32
	unsubdMsg  uint32
	pingMsg    struct{}
	pongMsg    struct{}
	subscribeV struct {
		SubID   uint32
		Start   wire.StartKind
		Arg     uint64
		Epoch   uint64
		Channel string
	}
	helloV struct {
		MinVersion, MaxVersion uint16
		Features               wire.Features
		Name, Token            string
	}
)

// decodeAny decodes body with the decoder for h.Type into a comparable value.
func decodeAny(h wire.Header, body []byte) (any, error) {
	switch h.Type {
	case wire.TypeHello:
		v, err := wire.DecodeHello(body)
		return helloV{v.MinVersion, v.MaxVersion, v.Features, v.Name, string(v.Token)}, err
	case wire.TypeWelcome:
		return wire.DecodeWelcome(body)
	case wire.TypePublish:
		ch, p, err := wire.DecodePublish(body)
		return publishMsg{string(ch), string(p)}, err
	case wire.TypePubAck:
		return wire.DecodePubAck(body, nil)
	case wire.TypeSubscribe:
		s, err := wire.DecodeSubscribe(body)
		return subscribeV{s.SubID, s.Start, s.Arg, s.Epoch, string(s.Channel)}, err
	case wire.TypeSubscribed:
		return wire.DecodeSubscribed(body)
	case wire.TypeUnsubscribe:
		v, err := wire.DecodeUnsubscribe(body)
		return unsubMsg(v), err
	case wire.TypeUnsubscribed:
		v, err := wire.DecodeUnsubscribed(body)
		return unsubdMsg(v), err
	case wire.TypeData:
		first, count, records, err := wire.DecodeData(body)
		if err != nil {
			return nil, err
		}
		d := dataMsg{First: first}
		for {
			p, rest, ok := wire.NextRecord(records)
			if !ok {
				break
			}
			d.Payloads = append(d.Payloads, string(p))
			records = rest
		}
		if len(records) != 0 || uint32(len(d.Payloads)) != count {
			return nil, fmt.Errorf("DATA: NextRecord yielded %d of %d records, %d bytes left", len(d.Payloads), count, len(records))
		}
		return d, nil
	case wire.TypeGap:
		return wire.DecodeGap(body)
	case wire.TypePing:
		return pingMsg{}, wire.DecodePing(body)
	case wire.TypePong:
		return pongMsg{}, wire.DecodePong(body)
	case wire.TypeError:
		return wire.DecodeError(h, body)
	case wire.TypeGoAway:
		return wire.DecodeGoAway(body)
	}
	return nil, fmt.Errorf("test: no decoder for %v", h.Type)
}

// raw builds a frame with an arbitrary body, for malformed cases.
func raw(t wire.Type, f wire.Flags, id uint32, parts ...[]byte) []byte {
	var body []byte
	for _, p := range parts {
		body = append(body, p...)
	}
	return append(wire.AppendHeader(nil, t, f, id, len(body)), body...)
}

// Big-endian field builders for raw bodies.
func u8(v uint8) []byte   { return []byte{v} }
func u16(v uint16) []byte { return []byte{byte(v >> 8), byte(v)} }
func u32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }
func u64(v uint64) []byte { return append(u32(uint32(v>>32)), u32(uint32(v))...) }
func str(s string) []byte { return []byte(s) }
