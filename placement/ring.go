package placement

import (
	"math/bits"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// ring is the immutable consistent-hashing ring over the Alive nodes.
//
// Invariants: hashes is sorted ascending; owner[i] is the node index (into
// Snapshot.nodes, which is sorted by ID) owning point i; equal hashes are
// ordered by owner, i.e. by node ID. start[b] is the first point whose top
// `bits` bits are >= b, for b in [0, 2^bits]; so the points of bucket b are
// hashes[start[b]:start[b+1]].
type ring struct {
	hashes []uint64
	owner  []int32
	start  []int32
	shift  uint // 64 - bucket bits; 64 when the ring has a single bucket
}

// mix64 is the splitmix64 finalizer: a bijection on uint64 with full avalanche.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// nodeHash is the seed of a node's ring points.
func nodeHash(id NodeID) uint64 { return xxhash.Sum64String(string(id)) }

// pointHash is the ring position of point v of a node. It depends only on the
// node's ID and v, which is what makes the ring consistent.
func pointHash(seed uint64, v int) uint64 {
	return mix64(seed + uint64(v+1)*0x9e3779b97f4a7c15)
}

// managerKey is the ring position of a channel for the manager role.
func managerKey(channel string) uint64 { return xxhash.Sum64String(channel) }

// hostKey is the ring position where the walk for streamlet seq of a channel
// starts. Different seq give unrelated positions.
func hostKey(channel string, seq uint64) uint64 {
	return mix64(xxhash.Sum64String(channel) ^ mix64(seq+0x632be59bd9b4e019))
}

// numPoints is how many ring points a node of capacity c owns.
func numPoints(c float64, o *Options) int {
	p := c / o.CapacityUnit * float64(o.PointsPerUnit)
	if !(p >= 1) { // also catches NaN
		return 1
	}
	if p >= float64(o.MaxPointsPerNode) {
		return o.MaxPointsPerNode
	}
	return int(p + 0.5)
}

// buildRing places points for every node index in alive (ascending).
func buildRing(nodes []nodeState, alive []int32, o *Options) ring {
	total := 0
	for _, i := range alive {
		total += nodes[i].points
	}
	type pt struct {
		h uint64
		o int32
	}
	pts := make([]pt, 0, total)
	for _, i := range alive {
		seed := nodeHash(nodes[i].ID)
		for v := 0; v < nodes[i].points; v++ {
			pts = append(pts, pt{pointHash(seed, v), i})
		}
	}
	slices.SortFunc(pts, func(a, b pt) int {
		if a.h != b.h {
			if a.h < b.h {
				return -1
			}
			return 1
		}
		return int(a.o) - int(b.o)
	})
	r := ring{hashes: make([]uint64, total), owner: make([]int32, total)}
	for i, p := range pts {
		r.hashes[i], r.owner[i] = p.h, p.o
	}
	// About one point per bucket: bucket bits = floor(log2(total)).
	b := 0
	if total > 1 {
		b = bits.Len(uint(total)) - 1
	}
	r.shift = uint(64 - b)
	nb := 1 << b
	r.start = make([]int32, nb+1)
	j := 0
	for k := 0; k <= nb; k++ {
		for j < total && bucketOf(r.hashes[j], r.shift) < uint64(k) {
			j++
		}
		r.start[k] = int32(j)
	}
	return r
}

// bucketOf is the bucket of hash h; with shift 64 there is one bucket.
func bucketOf(h uint64, shift uint) uint64 {
	if shift >= 64 {
		return 0
	}
	return h >> shift
}

// search returns the index of the first point at or after h, wrapping to 0.
// The ring must not be empty.
func (r *ring) search(h uint64) int {
	b := bucketOf(h, r.shift)
	i, end := int(r.start[b]), int(r.start[b+1])
	for i < end && r.hashes[i] < h {
		i++
	}
	if i == len(r.hashes) {
		return 0
	}
	return i
}
