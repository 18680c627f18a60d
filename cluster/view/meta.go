package view

import "encoding/json"

// Meta is the metadata a node gossips through the membership: its client
// address, its load report, whether it drains, its host's incarnation and
// its metadata log's advert. JSON, well under memberlist's 512-byte limit;
// the field names are the wire's, shared by every node of a cluster.
type Meta struct {
	Client     string  `json:"a"`
	Cap        float64 `json:"c"`
	Streamlets int     `json:"s"`
	Channels   int     `json:"ch"`
	Conns      int     `json:"cn"`
	MsgsIn     float64 `json:"mi"`
	BytesIn    float64 `json:"bi"`
	// Drain: the node drains: placement marks it Draining, and it is no
	// holder others may count on.
	Drain bool `json:"d,omitempty"`
	// Inst is the node's host incarnation (a new one at every start: a
	// restarted node holds nothing its earlier one held).
	Inst string `json:"i"`
	// Raft, SID and Boot are its metadata log's advert (metalog.Advert).
	Raft string `json:"r"`
	SID  string `json:"sid"`
	Boot bool   `json:"b,omitempty"`
	// Svc: the node answers the service ops (PROTOCOL.md 9.5, from 32 on:
	// presence); a node that does not say so is never sent them, since
	// an op it does not know would end the link.
	Svc bool `json:"sv,omitempty"`
}

// Encode returns m as gossiped.
func (m Meta) Encode() []byte {
	b, _ := json.Marshal(m) // a struct of strings, numbers and bools: never fails
	return b
}

// DecodeMeta decodes a member's gossiped metadata; false when it does not
// decode or names no client address (not a node of this cluster, or one
// that has not joined yet): such a member is not in the view.
func DecodeMeta(b []byte) (Meta, bool) {
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil || m.Client == "" {
		return Meta{}, false
	}
	return m, true
}

// Local returns this node's own metadata as gossiped next.
func (v *View) Local() Meta {
	v.localMu.Lock()
	defer v.localMu.Unlock()
	return v.local
}

// UpdateLocal changes this node's own metadata with f (under the view's
// lock of it: f must not call the View). The caller gossips it.
func (v *View) UpdateLocal(f func(*Meta)) {
	v.localMu.Lock()
	defer v.localMu.Unlock()
	f(&v.local)
}

// EncodeLocal returns this node's own metadata as gossiped (the
// membership's delegate calls it).
func (v *View) EncodeLocal() []byte { return v.Local().Encode() }
