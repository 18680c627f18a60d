// Package cluster benchmarks Sluice's cluster mode against a single node in
// the same process and the same run: 1:1 throughput and open-loop latency
// with the publisher and the subscriber on different nodes (Compare), and
// how a 3-node cluster spreads one hot channel and many cold ones over its
// nodes (Spread).
//
// Nodes are in-process engine.Servers on loopback (StartNodes); the
// workloads are package bench's scenarios, driven through a Split driver
// that sends successive connections to different nodes; where streamlets
// went is read from the nodes themselves with the node-to-node protocol's
// LIST and INFO operations (Probe).
//
// Concurrency: a Nodes value, a Probe and the Run functions are used by one
// goroutine; Split.Connect is safe for concurrent use.
package cluster
