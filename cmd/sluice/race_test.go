//go:build race

package main

// raceEnabled: the test binary runs with the race detector, so the sluice
// binary the multi-process test builds gets it too.
const raceEnabled = true
