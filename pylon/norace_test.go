//go:build !race

package pylon

const raceEnabled = false
