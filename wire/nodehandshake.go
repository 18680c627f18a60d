package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"io"
)

// NodeProof returns the NODE_HELLO proof of node name under the cluster
// secret (PROTOCOL.md 9.1): HMAC-SHA256 keyed with the secret over
// "sluice-node" 0x00 name; nil when there is no secret.
func NodeProof(secret, name string) []byte {
	if secret == "" {
		return nil
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("sluice-node\x00" + name))
	return m.Sum(nil)
}

// NodeHandshake is the dialer's side of the node handshake on rw: it
// writes NODE_HELLO h and reads the answer with the pre-handshake limit
// (MinMaxBody). It returns the accepting node's name and the Reader to go
// on with (raise its limit with SetMaxBody). A refusal is returned as the
// node's Error (match it with errors.As); any other answer wraps
// ErrMalformed. Deadlines are the caller's (set them on rw).
func NodeHandshake(rw io.ReadWriter, h NodeHello) (*Reader, string, error) {
	if _, err := rw.Write(AppendNodeHello(nil, h)); err != nil {
		return nil, "", err
	}
	r := NewReader(rw, MinMaxBody)
	hd, body, err := r.Next()
	if err != nil {
		return nil, "", err
	}
	switch hd.Type {
	case TypeNodeWelcome:
		name, err := DecodeNodeWelcome(body)
		if err != nil {
			return nil, "", err
		}
		return r, name, nil
	case TypeError:
		e, err := DecodeError(hd, body)
		if err != nil {
			return nil, "", err
		}
		return nil, "", e
	}
	return nil, "", fmt.Errorf("%w: %v in answer to NODE_HELLO", ErrMalformed, hd.Type)
}
