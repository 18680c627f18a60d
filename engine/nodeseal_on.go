//go:build !sluice_plainlinks

package engine

// plainLinksBuild: this build seals node links (the only build for use).
const plainLinksBuild = false
