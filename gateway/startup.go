package gateway

import "time"

// targetPoll is how often a request waiting out the start-up grace looks for its target.
const targetPoll = 25 * time.Millisecond

// awaitTarget is the start-up grace (Config.StartupGrace): a gateway that has just
// started knows none of its fleet, and each pylon registers again only with its next
// heartbeat (up to one interval), or after its reconnect backoff (about a second) when a
// heartbeat found the port closed. A request for a target without a backend in that
// window waits, looking again every targetPoll, until one registers or the grace ends;
// then it is routed, or refused as before. r is the request's resolution, without a
// scheduler; the result is the one to route with (only the directory is looked at again:
// the routing entry stays r's).
func (g *Gateway) awaitTarget(r *resolved) *resolved {
	end := g.started.Add(g.cfg.StartupGrace)
	for g.deps.Now().Before(end) {
		time.Sleep(min(targetPoll, end.Sub(g.deps.Now())))
		if pid := g.dir.Lookup(r.target); pid != nil {
			again := *r
			again.pid, again.ts = pid, g.metrics.target(r.target)
			return &again
		}
	}
	return r
}
