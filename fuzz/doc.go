// Package fuzz holds the fuzz harnesses that span packages. They start a
// real engine on 127.0.0.1 inside the test process and drive it over real
// TCP connections with fuzzer-chosen sequences of valid, mutated, truncated
// and oversized frames, then check that the server still serves a fresh
// client, leaks no goroutines, keeps its heap bounded, and answered every
// connection the way PROTOCOL.md requires.
//
// The package has no API: everything is in _test.go files. FUZZING.md at
// the repository root lists every fuzz target of the module, and
// fuzz/run.sh runs them all for a chosen duration.
package fuzz
