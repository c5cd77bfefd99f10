//go:build race

package gateway_test

// raceEnabled: the race detector makes sync.Pool drop a quarter of what is put back, so
// allocation counts through fasthttp's pools are not the program's.
const raceEnabled = true
