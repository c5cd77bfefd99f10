package fleet

import (
	"context"
	"time"
)

// Sleep waits d or until ctx ends (then its error): the pauses of the bench's drivers.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
