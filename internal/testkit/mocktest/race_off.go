//go:build !race

package mocktest

// RaceEnabled is false: this test binary runs without the race detector (see race_on.go).
const RaceEnabled = false
