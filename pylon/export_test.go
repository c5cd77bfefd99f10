package pylon

// Inflight is the number of requests the pylon still accounts as in flight (each
// admitted request adds one; its completion, failure or abort removes it exactly once).
func Inflight(p *Pylon) int64 { return p.inflight.Load() }
