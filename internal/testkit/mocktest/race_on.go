//go:build race

package mocktest

// RaceEnabled says the test binary runs under the race detector, which makes sync.Pool
// drop a quarter of what is put back: allocation counts through pools (fasthttp's,
// json.Valid's scanner) are then not the program's.
const RaceEnabled = true
