//go:build race

package fleet_test

// floodBackends is the flood test's backend count: with the race detector every memory
// access costs several times more, so it floods 100 000 targets instead of 200 000.
const floodBackends = 400
