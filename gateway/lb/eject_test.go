package lb_test

import (
	"testing"

	"github.com/switchyard/switchyard/gateway/lb"
)

func TestEjectionAllowance(t *testing.T) {
	for _, tc := range []struct{ ejected, routable, pct, want int }{
		{3, 4, 0, 3},
		{3, 4, 100, 3},
		{3, 4, 50, 2},
		{1, 4, 50, 1},
		{2, 3, 10, 1}, // always at least one
		{0, 3, 10, 0},
	} {
		if got := lb.EjectionAllowance(tc.ejected, tc.routable, tc.pct); got != tc.want {
			t.Errorf("EjectionAllowance(%d, %d, %d) = %d, want %d", tc.ejected, tc.routable, tc.pct, got, tc.want)
		}
	}
}
