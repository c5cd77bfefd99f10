package gateway_test

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/switchyard/switchyard/gateway"
)

// Within --startup-grace of the gateway's start, a request for a model no backend has
// registered yet waits for one (a restarted gateway's pylons register again only with
// their next heartbeat) and is served once it registers; a model nobody registers is
// refused with 404 at the end of the grace, and at once after it.
func TestStartupGraceWaitsForTheFirstRegistration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, gateway.Config{StartupGrace: 3 * time.Second}, `{"default":"round-robin"}`)
		start := time.Now()
		var wg sync.WaitGroup
		var served, unknown response
		var servedAt, unknownAt time.Duration
		wg.Go(func() {
			served = h.chat(nil)
			servedAt = time.Since(start)
		})
		wg.Go(func() {
			unknown = h.chat(map[string]string{"x-model": "nobody-serves-this"})
			unknownAt = time.Since(start)
		})
		time.Sleep(time.Second)
		h.register(h.pylon("late", "c-late", idleLoad(), nil))
		wg.Wait()
		if served.status != 200 || !strings.Contains(served.body, `"served_by":"late"`) || servedAt < time.Second || servedAt > time.Second+100*time.Millisecond {
			t.Errorf("a request sent before its backend registered: %d after %v (%s), want 200 from late at about 1 s", served.status, servedAt, served.body)
		}
		if unknown.status != 404 || unknownAt != 3*time.Second {
			t.Errorf("a model nobody registers, within the grace: %d after %v, want 404 at the grace's end (3 s)", unknown.status, unknownAt)
		}
		before := time.Now()
		if r := h.chat(map[string]string{"x-model": "nobody-serves-this"}); r.status != 404 || time.Since(before) != 0 {
			t.Errorf("a model nobody registers, after the grace: %d after %v, want 404 at once", r.status, time.Since(before))
		}
	})
}
