//go:build sluice_plainlinks

package engine

// plainLinksBuild: a benchmark-only build (go build -tags
// sluice_plainlinks) whose node links authenticate but do not seal
// frames; see nodeseal.go. Never for use: it logs a warning at start.
const plainLinksBuild = true
