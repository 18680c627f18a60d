package metalog

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/raft"
)

// A server id is the node name, '@', and an incarnation: 16 lowercase hex
// digits drawn at random when the node first starts with an empty store.
// It is kept in raft's stable store (key stableIDKey), next to the term and
// the vote, so the id lives and dies with the log and the vote it stands
// for: a node restarted with its data directory keeps its id, its log and
// its vote; a node whose directory (or just its log) was lost draws a new
// incarnation and so comes back as a new server, added by the leader as a
// non-voter while its old id is removed. It never votes with an empty log
// under an id that promised a vote with a full one.
//
// The id also travels in the node handshake of every Raft connection (as
// the handshake's node name) and in the Raft address (transport address,
// '/', id), so a dialer that means server X is refused by anything else
// answering at X's address, such as X's successor after a lost directory:
// without that check, the successor would answer, and vote, for X.

// stableIDKey is the stable-store key of the server id.
var stableIDKey = []byte("sluice-metalog-server-id")

const incarnationHex = 16 // hex digits of an incarnation

// MaxNodeName is the longest node name a Raft log takes: the server id
// (name, '@', 16 digits) must fit the handshake's 255-byte name.
const MaxNodeName = 255 - 1 - incarnationHex

// ErrIdentity is wrapped by the errors about the stored server id: not
// readable, malformed, or another node's.
var ErrIdentity = errors.New("metalog: server identity")

// serverID returns the server id of node with incarnation inc.
func serverID(node, inc string) string { return node + "@" + inc }

// parseServerID splits a server id at its last '@'. ok is false unless the
// node part is not empty and the incarnation is 16 lowercase hex digits.
func parseServerID(id string) (node, inc string, ok bool) {
	i := strings.LastIndexByte(id, '@')
	if i <= 0 || len(id)-i-1 != incarnationHex {
		return "", "", false
	}
	node, inc = id[:i], id[i+1:]
	for j := 0; j < len(inc); j++ {
		if c := inc[j]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", "", false
		}
	}
	return node, inc, true
}

// nodeOf returns the node name of a server id, or the id itself when it is
// not one of ours.
func nodeOf(id string) string {
	if node, _, ok := parseServerID(id); ok {
		return node
	}
	return id
}

// newServerID draws a new incarnation of node from rnd.
func newServerID(node string, rnd io.Reader) (string, error) {
	var b [incarnationHex / 2]byte
	if _, err := io.ReadFull(rnd, b[:]); err != nil {
		return "", fmt.Errorf("%w: no randomness: %v", ErrIdentity, err)
	}
	return serverID(node, hex.EncodeToString(b[:])), nil
}

// loadIdentity returns node's server id from the stable store, drawing and
// storing a new one when there is none. created tells which. A stored id
// that is malformed or names another node is an error: the store is not
// this node's, and using it would give two nodes one identity.
func loadIdentity(st raft.StableStore, node string) (id string, created bool, err error) {
	b, err := st.Get(stableIDKey)
	if err != nil && len(b) == 0 && !isNotFound(err) {
		return "", false, fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	if len(b) > 0 {
		got, _, ok := parseServerID(string(b))
		switch {
		case !ok:
			return "", false, fmt.Errorf("%w: malformed server id %q in the store", ErrIdentity, b)
		case got != node:
			return "", false, fmt.Errorf("%w: the data directory belongs to node %q, not %q", ErrIdentity, got, node)
		}
		return string(b), false, nil
	}
	if id, err = newServerID(node, rand.Reader); err != nil {
		return "", false, err
	}
	if err := st.Set(stableIDKey, []byte(id)); err != nil {
		return "", false, fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	return id, true, nil
}

// isNotFound recognises raft's in-memory store's missing key (the WAL
// answers nil, nil).
func isNotFound(err error) bool { return err != nil && err.Error() == "not found" }

// raftAddress returns the Raft address of server id at hostport.
func raftAddress(hostport, id string) string { return hostport + "/" + id }

// splitRaftAddress splits a Raft address at its first '/' (a host:port
// has none); id is "" when there is no '/'.
func splitRaftAddress(a string) (hostport, id string) {
	hostport, id, _ = strings.Cut(a, "/")
	return hostport, id
}

// addr is a net.Addr of a Raft address.
type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }
