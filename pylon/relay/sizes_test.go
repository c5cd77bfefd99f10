package relay_test

import (
	"testing"

	"github.com/switchyard/switchyard/pylon/relay"
)

func TestUpstreamConnCapFollowsTheClientCap(t *testing.T) {
	for _, tc := range []struct{ clients, want int }{
		{10000, 10064}, // the default listener cap: every client connection can hold a stream, probes have room
		{1, 65},
		{-1, 1 << 20}, // no listener cap: no practical upstream cap either
	} {
		if got := relay.UpstreamConnCap(tc.clients); got != tc.want {
			t.Errorf("UpstreamConnCap(%d) = %d, want %d", tc.clients, got, tc.want)
		}
	}
}
