package gateway

import "github.com/switchyard/switchyard/gateway/dispatch"

// legacyInputWorkCode is the error code older gateways gave input-work admission
// rejections (--legacy-input-work-error-code).
const legacyInputWorkCode = "input_work_limit_exceeded"

// rejectionError is the error answering a request the scheduler rejected for r: the
// rejection table's, with the legacy input-work code when configured.
func (g *Gateway) rejectionError(r dispatch.Reason) *httpError {
	he := routingError(r)
	if g.cfg.LegacyInputWorkErrorCode && (r == dispatch.ReasonInputWorkLimit || r == dispatch.ReasonInputWorkCapacity) {
		he.code = legacyInputWorkCode
	}
	return he
}
