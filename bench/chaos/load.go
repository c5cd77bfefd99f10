package chaos

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// maxRequestsPerWorker bounds each load worker's loop whatever its duration.
const maxRequestsPerWorker = 1_000_000

// Load is a steady load of new requests: workers each sending one request at a time,
// pause apart, until Stop. Every request goes through the ledger.
type Load struct {
	ledger  *Ledger
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
	next    atomic.Uint64
}

// StartLoad starts workers sending mix(n) to c, each waiting pause after each answer.
// The workers end at Stop or when ctx ends (bound the run with ctx's deadline too).
func StartLoad(ctx context.Context, c *Client, workers int, pause, hang time.Duration, mix func(n uint64) Request) *Load {
	l := &Load{ledger: NewLedger(), stop: make(chan struct{})}
	for range workers {
		l.wg.Go(func() {
			for range maxRequestsPerWorker {
				select {
				case <-l.stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				n := l.next.Add(1)
				id := l.ledger.Begin(time.Now())
				l.ledger.Finish(id, c.Do(ctx, mix(n), hang))
				if pause > 0 {
					t := time.NewTimer(pause)
					select {
					case <-l.stop:
					case <-ctx.Done():
					case <-t.C:
					}
					t.Stop()
				}
			}
		})
	}
	return l
}

// Stop stops sending, waits for the requests in flight (each is bounded by the hang
// bound) and returns every outcome.
func (l *Load) Stop() []Result {
	l.stopped.Do(func() { close(l.stop) })
	l.wg.Wait()
	return l.ledger.Results()
}

// Ledger returns the load's ledger.
func (l *Load) Ledger() *Ledger { return l.ledger }
