// Package chartcheck validates the Helm chart in deploy/helm/sluice
// offline: its tests render the chart with the pinned helm for several
// value sets and decode every rendered object strictly into the
// Kubernetes API types (k8s.io/api: an unknown or misspelt field, or a
// value of the wrong type, is an error), then check what the types
// cannot: names, selectors, ports, probes, volumes, the grace period
// against the drain, and that every flag the chart passes exists in
// docs/serve-flags.md (generated from `sluice serve`).
//
// It is its own module so that the server's go.mod stays free of the
// Kubernetes libraries. Run it with deploy/helm/check.sh, or
//
//	cd deploy && go test ./...
//
// with helm on $PATH or in $HELM (CI installs the pinned version).
package chartcheck
