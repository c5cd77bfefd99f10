//go:build race

package pylon

// raceEnabled: under the race detector sync.Pool drops items at random, so pooled
// objects show up as allocations.
const raceEnabled = true
