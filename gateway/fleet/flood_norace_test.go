//go:build !race

package fleet_test

// floodBackends is the flood test's backend count (250 models each: 200 000 targets).
const floodBackends = 800
