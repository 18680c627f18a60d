package wire

import (
	"encoding/binary"
	"math"
	"time"
)

// ---------------------------------------------------------------------------
// REFRESH (0x0F, client -> server), id = request id. Only after
// FeatureRefresh. Exact length:
//
//	off   size  field
//	0     2     tokenLen (u16, at least 1; a server refuses over MaxTokenLen)
//	2     T     token

// AppendRefresh appends a whole REFRESH frame carrying token (1..65535
// bytes; a server refuses more than MaxTokenLen as credentials).
func AppendRefresh(dst []byte, id uint32, token []byte) []byte {
	mustFit(TypeRefresh, "token length", len(token), math.MaxUint16)
	dst = AppendHeader(dst, TypeRefresh, 0, id, 2+len(token))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(token)))
	return append(dst, token...)
}

// DecodeRefresh decodes a REFRESH body; the token aliases it.
func DecodeRefresh(body []byte) ([]byte, error) {
	d := decoder{b: body, frame: TypeRefresh}
	tl := d.u16("tokenLen")
	if d.err == nil && tl == 0 {
		d.failf("empty token")
	}
	tok := d.bytes(int(tl), "token")
	if err := d.exact(); err != nil {
		return nil, err
	}
	return tok, nil
}

// ---------------------------------------------------------------------------
// AUTHED (0x10, server -> client), id = the HELLO's (sent right after
// WELCOME) or the REFRESH's it answers. Only after FeatureRefresh. Exact
// length:
//
//	off   size  field
//	0     4     expiresInMs (u32; 0 = the credentials do not expire)
//	4     4     graceMs (u32)
//	8     1     clientIDLen (u8)
//	9     I     clientID

// Authed is the body of an AUTHED frame.
type Authed struct {
	// ExpiresIn is how long the connection's token stays valid from when
	// the frame was sent (0: it does not expire), in whole milliseconds
	// (at least 1 ms when not 0; capped at the u32 range, about 49 days).
	ExpiresIn time.Duration
	// Grace is how long after the expiry a REFRESH is still taken before
	// the server closes the connection with TOKEN_EXPIRED.
	Grace time.Duration
	// ClientID is the id the server knows the client by (a JWT's "sub"),
	// at most 255 bytes; "" for none.
	ClientID string
}

const authedFixedLen = 4 + 4 + 1

// AppendAuthed appends a whole AUTHED frame. len(a.ClientID) must be <=
// MaxNameLen.
func AppendAuthed(dst []byte, id uint32, a Authed) []byte {
	mustFit(TypeAuthed, "client id length", len(a.ClientID), MaxNameLen)
	dst = AppendHeader(dst, TypeAuthed, 0, id, authedFixedLen+len(a.ClientID))
	exp := millis(a.ExpiresIn)
	if a.ExpiresIn > 0 && exp == 0 {
		exp = 1
	}
	dst = binary.BigEndian.AppendUint32(dst, exp)
	dst = binary.BigEndian.AppendUint32(dst, millis(a.Grace))
	dst = append(dst, byte(len(a.ClientID)))
	return append(dst, a.ClientID...)
}

// DecodeAuthed decodes an AUTHED body.
func DecodeAuthed(body []byte) (Authed, error) {
	d := decoder{b: body, frame: TypeAuthed}
	var a Authed
	a.ExpiresIn = time.Duration(d.u32("expiresInMs")) * time.Millisecond
	a.Grace = time.Duration(d.u32("graceMs")) * time.Millisecond
	a.ClientID = string(d.bytes(int(d.u8("clientIDLen")), "clientID"))
	if err := d.exact(); err != nil {
		return Authed{}, err
	}
	return a, nil
}
