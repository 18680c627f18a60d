// Package peer holds the NATS side of Sluice's load benchmarks: a
// bench.Driver for NATS core (nats.go) and one for JetStream on a memory
// stream (acknowledged publish and replay), and a starter for an embedded
// nats-server. It lives in its own Go module (bench/peer) so that the main
// module never depends on NATS.
//
// The scenarios themselves are those of package bench; cmd/compare runs
// them against Sluice and NATS alternately and prints the ratio.
// cmd/rbench starts a 3-node Sluice cluster and a 3-node nats-server
// cluster (StartClusterNode) with a JetStream stream of 3 replicas
// (CreateReplicatedStream) and measures replicated acknowledged publishing
// and publish-to-delivery latency on both, alternately; its JetStream
// subscribers read the stream (JetStreamStreamNode).
package peer
