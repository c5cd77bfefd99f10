//go:build !race

package mocktest

// RaceEnabled: see race_on.go.
const RaceEnabled = false
