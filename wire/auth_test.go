package wire_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// TestGoldenAuth checks REFRESH and AUTHED against their annotated
// vectors (testdata/auth/) in both directions.
func TestGoldenAuth(t *testing.T) {
	authed := wire.Authed{ExpiresIn: 15 * time.Minute, Grace: 10 * time.Second, ClientID: "alice"}
	for name, frame := range map[string][]byte{
		"refresh": wire.AppendRefresh(nil, 40, []byte("aaa.bbb.ccc")),
		"authed":  wire.AppendAuthed(nil, 40, authed),
	} {
		golden := readHex(t, filepath.Join("testdata", "auth", name+".hex"))
		if !bytes.Equal(frame, golden) {
			t.Fatalf("%s: encoded\n% x\ngolden\n% x", name, frame, golden)
		}
		h, body, _, err := wire.Split(golden, testMaxBody)
		if err != nil || h.ID != 40 {
			t.Fatalf("%s: %+v %v", name, h, err)
		}
		switch h.Type {
		case wire.TypeRefresh:
			if tok, err := wire.DecodeRefresh(body); err != nil || string(tok) != "aaa.bbb.ccc" {
				t.Fatalf("REFRESH: %q %v", tok, err)
			}
		case wire.TypeAuthed:
			if a, err := wire.DecodeAuthed(body); err != nil || a != authed {
				t.Fatalf("AUTHED: %+v %v", a, err)
			}
		default:
			t.Fatalf("%s: type %v", name, h.Type)
		}
	}
}

// TestAuthFramesMalformed: each way REFRESH and AUTHED bodies can be
// wrong, with the field named in the error.
func TestAuthFramesMalformed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		field string
	}{
		{"REFRESH/empty body", errOf(wire.DecodeRefresh(nil)), "tokenLen"},
		{"REFRESH/empty token", errOf(wire.DecodeRefresh(u16(0))), "empty token"},
		{"REFRESH/short token", errOf(wire.DecodeRefresh(cat(u16(5), []byte("abc")))), "token at offset 2 needs 5"},
		{"REFRESH/trailing", errOf(wire.DecodeRefresh(cat(u16(1), []byte("ab")))), "1 trailing"},
		{"AUTHED/short", errOf(wire.DecodeAuthed(u32(1))), "graceMs"},
		{"AUTHED/short id", errOf(wire.DecodeAuthed(cat(u32(1), u32(2), u8(3), []byte("ab")))), "clientID"},
		{"AUTHED/trailing", errOf(wire.DecodeAuthed(cat(u32(1), u32(2), u8(0), u8(9)))), "1 trailing"},
	} {
		if !errors.Is(tc.err, wire.ErrMalformed) || !strings.Contains(tc.err.Error(), tc.field) {
			t.Errorf("%s: %v, want ErrMalformed naming %q", tc.name, tc.err, tc.field)
		}
	}
	// A long token is not malformed: the server refuses it as credentials.
	if tok, err := wire.DecodeRefresh(cat(u16(5000), make([]byte, 5000))); err != nil || len(tok) != 5000 {
		t.Fatalf("5,000-byte token: %d %v", len(tok), err)
	}
	// An expiry under a millisecond is sent as 1 ms, never as "does not
	// expire".
	a, err := wire.DecodeAuthed(wire.AppendAuthed(nil, 1, wire.Authed{ExpiresIn: time.Microsecond})[wire.HeaderLen:])
	if err != nil || a.ExpiresIn != time.Millisecond {
		t.Fatalf("1 us expiry: %+v %v", a, err)
	}
}

func errOf[T any](_ T, err error) error { return err }
