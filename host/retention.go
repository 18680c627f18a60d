package host

import "slices"

// The retention budget (the engine's Options.MaxRetained) bounds the bytes
// of message history a node keeps: its hosted streamlets plus its gateway
// copies. The host sums their footprints as buffers grow and are recycled
// (Host.Retained), so a check under the budget costs one atomic load; a
// node over its budget collects the sealed candidates (Host.Footprint,
// Footprint for the copies) and expires the oldest seals first
// (ChooseExpired) until it fits. Open streamlets are never candidates.

// Retained is one sealed streamlet or copy that the budget may expire.
type Retained struct {
	Seq uint64 // Streamlet.SealSeq
	FP  int    // its footprint
	S   *Streamlet
}

// Retained returns the bytes of history this node holds: the footprints of
// its hosted streamlets and of its copies (NewCopy).
func (h *Host) Retained() int64 { return h.retained.Load() }

// Footprint returns the bytes held by the host's streamlets and appends
// the sealed ones to *cands.
func (h *Host) Footprint(cands *[]Retained) int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return Footprint(h.streamlets, cands)
}

// Footprint returns the bytes held by the streamlets of m and appends the
// sealed ones to *cands; the caller holds m's lock.
func Footprint(m map[uint64]*Streamlet, cands *[]Retained) int64 {
	var total int64
	for _, s := range m {
		fp := s.buf.Footprint()
		total += int64(fp)
		if seq := s.sealSeq.Load(); seq != 0 && s.buf.Sealed() {
			*cands = append(*cands, Retained{seq, fp, s})
		}
	}
	return total
}

// ChooseExpired returns the candidates to expire, oldest seal first, so
// that total minus their footprints fits in budget (all of them when it
// cannot). It reorders cands.
func ChooseExpired(total, budget int64, cands []Retained) []Retained {
	slices.SortFunc(cands, func(a, b Retained) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	k := 0
	for k < len(cands) && total > budget {
		total -= int64(cands[k].FP)
		k++
	}
	return cands[:k]
}
