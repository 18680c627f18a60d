// Package bench is Sluice's load-benchmark library: workloads (scenarios)
// written once against a small Driver interface and run against Sluice
// (SluiceDriver, over the public client SDK) or, from the nested module
// bench/peer, against NATS, so that both systems see the same message
// sizes, connection counts and schedules in the same run.
//
// Scenarios (see Scenarios): publish only; 1:1 and 1:N fan-out; N:M over many
// channels; acknowledged publish, synchronous and pipelined; latency at a
// fixed rate measured open loop (every message carries its intended send
// time, so a stall shows up in the tail instead of being hidden: no
// coordinated omission; the publisher waits for each due time as Pacer's
// Mode says); replay of retained messages from the earliest; and idle
// connections (server memory per connection).
//
// Measurements: throughput over the timed phase, a log-linear latency
// Histogram (p50, p99, p99.9, max), and, where the server's process is known
// (a child process, or the current process for an in-process server), its
// CPU time per message and resident memory (ProcStat).
//
// Concurrency: a Run call owns every connection it makes and closes them
// before it returns; Progress may be read from any goroutine while a run is
// in flight.
package bench
