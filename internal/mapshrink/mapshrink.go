// Package mapshrink gives back the memory of Go maps that shrank.
//
// A Go map never releases its buckets when entries are deleted: a map that
// once held 100,000 channels keeps the memory of 100,000 slots after every
// one of them was deleted (issue 14: after 100,000 small channels expired,
// the host's, the manager's and the gateway's maps pinned about 20 MiB of
// an idle server). Delete and Shrink copy a map into a fresh one once it
// holds at most a quarter of the most it held since its last copy, so the
// memory follows the contents down at an amortized cost of O(1) per delete.
package mapshrink

import "maps"

// MinPeak is the smallest high-water mark worth a copy: smaller maps keep
// their memory (a few KiB at most).
const MinPeak = 64

// Peak is a map's high-water mark since its last copy. The zero value is
// ready; it is guarded by whatever guards its map.
type Peak struct{ n int }

// Seen records that the map holds n entries (call it before deleting).
func (p *Peak) Seen(n int) { p.n = max(p.n, n) }

// Delete deletes k from m and returns m, or a fresh copy of what is left
// when m has shrunk to a quarter of its peak.
func Delete[M ~map[K]V, K comparable, V any](m M, k K, p *Peak) M {
	p.Seen(len(m))
	delete(m, k)
	return Shrink(m, p)
}

// Shrink returns m, or a fresh copy of it when it holds at most a quarter
// of the peak p recorded (and that peak was at least MinPeak). Deletes made
// without Delete must have called p.Seen first.
func Shrink[M ~map[K]V, K comparable, V any](m M, p *Peak) M {
	if p.n < MinPeak || len(m) > p.n/4 {
		return m
	}
	fresh := make(M, len(m))
	maps.Copy(fresh, m)
	p.n = len(m)
	return fresh
}
