package wire

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// The node handshake (PROTOCOL.md 9.1): a mutual challenge-response over
// four plaintext frames, after which every frame in both directions
// travels inside NODE_SEALED records (seal.go).
//
//	dialer                                   acceptor
//	NODE_HELLO     version, name, address, nonceD   ->
//	            <- NODE_CHALLENGE  name, nonceA
//	NODE_PROOF     HMAC(secret, "dialer" label, T)  ->
//	            <- NODE_WELCOME    HMAC(secret, "acceptor" label, T)
//	NODE_SEALED ...                                 <-> NODE_SEALED ...
//
// T, the transcript, is the NODE_HELLO body and the NODE_CHALLENGE body,
// each preceded by its u32 length: it binds both fresh nonces, both names,
// the dialer's address and the version. Each side proves knowledge of the
// secret over T under a label naming its direction, so a proof recorded on
// one connection fails on any other (the peer's nonce differs), and a
// proof cannot be reflected to its sender (the labels differ). The
// acceptor proves itself only after the dialer has, so a caller without the
// secret gets no MAC computed over anything it chose. The keys of the
// sealed records are derived with HKDF-SHA256 from the secret, both nonces
// and T, one key per direction.

// NodeVersion is the node-to-node protocol version in NODE_HELLO. Version 1
// (a replayable proof, unprotected frames) is no longer accepted; version
// 2 (the coordination the metadata log replaced: its ops mean other
// things) neither: nodes of different versions refuse each other.
const NodeVersion uint16 = 3

// Sizes of the handshake's fixed fields.
const (
	NodeNonceLen = 32 // a NODE_HELLO or NODE_CHALLENGE nonce
	NodeProofLen = 32 // an HMAC-SHA256 proof in NODE_PROOF or NODE_WELCOME
	NodeKeyLen   = 32 // an AES-256-GCM key of one direction
)

// NodeHello is the body of NODE_HELLO (dialer -> acceptor, first frame):
//
//	u16 version, str8 name (1..255), str8 client address, 32 bytes nonce
type NodeHello struct {
	Version    uint16
	Name       string // the dialing node's name
	ClientAddr string // the dialing node's client address
	Nonce      [NodeNonceLen]byte
}

// AppendNodeHello appends a whole NODE_HELLO frame.
func AppendNodeHello(dst []byte, h NodeHello) []byte {
	n := 2 + 1 + len(h.Name) + 1 + len(h.ClientAddr) + NodeNonceLen
	dst = AppendHeader(dst, TypeNodeHello, 0, 0, n)
	return appendNodeHelloBody(dst, h)
}

func appendNodeHelloBody(dst []byte, h NodeHello) []byte {
	dst = binary.BigEndian.AppendUint16(dst, h.Version)
	dst = appendStr8(dst, TypeNodeHello, "name", h.Name)
	dst = appendStr8(dst, TypeNodeHello, "client address", h.ClientAddr)
	return append(dst, h.Nonce[:]...)
}

// DecodeNodeHello decodes a NODE_HELLO body. It does not check the
// version: an acceptor answers a version it does not speak with
// UNSUPPORTED_VERSION, so the version is read first and, when the body is
// too short for anything else, returned together with the error.
func DecodeNodeHello(body []byte) (NodeHello, error) {
	d := decoder{b: body, frame: TypeNodeHello}
	var h NodeHello
	h.Version = d.u16("version")
	h.Name = d.str8("name")
	h.ClientAddr = d.str8("client address")
	copy(h.Nonce[:], d.bytes(NodeNonceLen, "nonce"))
	if d.err == nil && h.Name == "" {
		d.failf("empty node name")
	}
	return h, d.exact()
}

// NodeChallenge is the body of NODE_CHALLENGE (acceptor -> dialer):
//
//	str8 name (1..255), 32 bytes nonce
type NodeChallenge struct {
	Name  string // the accepting node's name
	Nonce [NodeNonceLen]byte
}

// AppendNodeChallenge appends a whole NODE_CHALLENGE frame.
func AppendNodeChallenge(dst []byte, c NodeChallenge) []byte {
	dst = AppendHeader(dst, TypeNodeChallenge, 0, 0, 1+len(c.Name)+NodeNonceLen)
	return appendNodeChallengeBody(dst, c)
}

func appendNodeChallengeBody(dst []byte, c NodeChallenge) []byte {
	dst = appendStr8(dst, TypeNodeChallenge, "name", c.Name)
	return append(dst, c.Nonce[:]...)
}

// DecodeNodeChallenge decodes a NODE_CHALLENGE body.
func DecodeNodeChallenge(body []byte) (NodeChallenge, error) {
	d := decoder{b: body, frame: TypeNodeChallenge}
	var c NodeChallenge
	c.Name = d.str8("name")
	copy(c.Nonce[:], d.bytes(NodeNonceLen, "nonce"))
	if d.err == nil && c.Name == "" {
		d.failf("empty node name")
	}
	return c, d.exact()
}

// AppendNodeProof appends a whole NODE_PROOF frame (the dialer's proof).
func AppendNodeProof(dst []byte, proof [NodeProofLen]byte) []byte {
	dst = AppendHeader(dst, TypeNodeProof, 0, 0, NodeProofLen)
	return append(dst, proof[:]...)
}

// DecodeNodeProof decodes a NODE_PROOF body: exactly 32 bytes.
func DecodeNodeProof(body []byte) ([NodeProofLen]byte, error) {
	return decodeProof(body, TypeNodeProof)
}

// AppendNodeWelcome appends a whole NODE_WELCOME frame (the acceptor's
// proof, the last plaintext frame of a node connection).
func AppendNodeWelcome(dst []byte, proof [NodeProofLen]byte) []byte {
	dst = AppendHeader(dst, TypeNodeWelcome, 0, 0, NodeProofLen)
	return append(dst, proof[:]...)
}

// DecodeNodeWelcome decodes a NODE_WELCOME body: exactly 32 bytes.
func DecodeNodeWelcome(body []byte) ([NodeProofLen]byte, error) {
	return decodeProof(body, TypeNodeWelcome)
}

func decodeProof(body []byte, t Type) ([NodeProofLen]byte, error) {
	d := decoder{b: body, frame: t}
	var p [NodeProofLen]byte
	copy(p[:], d.bytes(NodeProofLen, "proof"))
	return p, d.exact()
}

// NodeRole is one side of a node connection.
type NodeRole uint8

// The two roles; each labels its proof and its sending key.
const (
	RoleDialer   NodeRole = 1
	RoleAcceptor NodeRole = 2
)

func (r NodeRole) label() string {
	if r == RoleDialer {
		return "sluice node v2 dialer proof\x00"
	}
	return "sluice node v2 acceptor proof\x00"
}

// NodeTranscript returns T: u32 length and body of NODE_HELLO, then u32
// length and body of NODE_CHALLENGE (PROTOCOL.md 9.1).
func NodeTranscript(h NodeHello, c NodeChallenge) []byte {
	hb := appendNodeHelloBody(nil, h)
	cb := appendNodeChallengeBody(nil, c)
	t := make([]byte, 0, 8+len(hb)+len(cb))
	t = binary.BigEndian.AppendUint32(t, uint32(len(hb)))
	t = append(t, hb...)
	t = binary.BigEndian.AppendUint32(t, uint32(len(cb)))
	return append(t, cb...)
}

// ComputeNodeProof returns role's proof over transcript t:
// HMAC-SHA256(key = secret, message = role's label || t).
func ComputeNodeProof(secret string, role NodeRole, t []byte) [NodeProofLen]byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(role.label()))
	m.Write(t)
	var p [NodeProofLen]byte
	m.Sum(p[:0])
	return p
}

// CheckNodeProof reports, in constant time, whether proof is role's proof
// over t under secret.
func CheckNodeProof(secret string, role NodeRole, t []byte, proof [NodeProofLen]byte) bool {
	want := ComputeNodeProof(secret, role, t)
	return hmac.Equal(want[:], proof[:])
}

// nodeKeysInfo is the HKDF info prefix; SHA-256(T) follows it.
const nodeKeysInfo = "sluice node v2 keys\x00"

// NodeKeys holds the two record keys of one connection.
type NodeKeys struct {
	DialerToAcceptor [NodeKeyLen]byte
	AcceptorToDialer [NodeKeyLen]byte
}

// DeriveNodeKeys derives the connection's record keys: the 64 bytes of
// HKDF-SHA256(IKM = secret, salt = nonceD || nonceA, info = "sluice node
// v2 keys" 0x00 || SHA-256(T)), the first 32 the dialer's sending key, the
// last 32 the acceptor's.
func DeriveNodeKeys(secret string, h NodeHello, c NodeChallenge) NodeKeys {
	sum := sha256.Sum256(NodeTranscript(h, c))
	salt := make([]byte, 0, 2*NodeNonceLen)
	salt = append(append(salt, h.Nonce[:]...), c.Nonce[:]...)
	okm, err := hkdf.Key(sha256.New, []byte(secret), salt, nodeKeysInfo+string(sum[:]), 2*NodeKeyLen)
	if err != nil {
		// Only a length over 255 x 32 bytes (or a FIPS-only minimum) fails.
		panic("wire: HKDF: " + err.Error())
	}
	var k NodeKeys
	copy(k.DialerToAcceptor[:], okm[:NodeKeyLen])
	copy(k.AcceptorToDialer[:], okm[NodeKeyLen:])
	return k
}

// Send returns the key role seals with; Receive the key it opens with.
func (k NodeKeys) Send(role NodeRole) [NodeKeyLen]byte {
	if role == RoleDialer {
		return k.DialerToAcceptor
	}
	return k.AcceptorToDialer
}

// Receive returns the key role opens the peer's records with.
func (k NodeKeys) Receive(role NodeRole) [NodeKeyLen]byte {
	if role == RoleDialer {
		return k.AcceptorToDialer
	}
	return k.DialerToAcceptor
}
