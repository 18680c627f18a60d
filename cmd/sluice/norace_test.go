//go:build !race

package main

// raceEnabled: the test binary runs without the race detector.
const raceEnabled = false
