package placement

import "errors"

// Sentinel errors. Returned errors wrap one of these with context; test with
// errors.Is.
var (
	// ErrInvalidNode: a node has an empty or duplicate ID, a capacity that is
	// not a positive finite number, an unknown state, or a load report with a
	// negative, NaN or infinite field (CPU and Mem must be in [0,1]).
	ErrInvalidNode = errors.New("placement: invalid node")
	// ErrInvalidOptions: an Options field is out of range.
	ErrInvalidOptions = errors.New("placement: invalid options")
	// ErrInvalidLoad: a scorer returned, or a caller passed, a load that is
	// negative, NaN or infinite.
	ErrInvalidLoad = errors.New("placement: invalid load")
	// ErrUnknownNode: the node ID is not in the snapshot.
	ErrUnknownNode = errors.New("placement: unknown node")
	// ErrStaleDecision: a Decision does not belong to this snapshot's
	// membership (its Index and Node do not match).
	ErrStaleDecision = errors.New("placement: stale decision")
	// ErrTooLarge: the membership would need more ring points than MaxRingPoints.
	ErrTooLarge = errors.New("placement: membership too large")
)
