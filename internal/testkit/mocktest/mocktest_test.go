package mocktest_test

import (
	"testing"

	"github.com/switchyard/switchyard/internal/testkit/mocktest"
)

// FreeAddr never hands out the same address twice in one process, even when the kernel
// offers a just-closed port again.
func TestFreeAddrIsUniqueInTheProcess(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 300 {
		a := mocktest.FreeAddr(t)
		if seen[a] {
			t.Fatalf("FreeAddr returned %s twice", a)
		}
		seen[a] = true
	}
}
