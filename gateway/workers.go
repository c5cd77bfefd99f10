package gateway

import (
	"strings"

	"github.com/switchyard/switchyard/internal/wire"
)

// adminAuthorized reports whether an admin request for path may proceed: with the control
// token (or none configured), or, for a registration with worker credentials configured,
// with a token listed for the registering inference server id.
func (g *Gateway) adminAuthorized(path string, authorization []byte) bool {
	if g.workers.Configured() {
		if id, ok := strings.CutPrefix(path, wire.RegistrationPath); ok {
			if g.workers.Check(id, authorization) {
				return true
			}
			// The control token still admits any registration; without one configured,
			// the credentials file is what guards registrations.
			return g.token.Configured() && g.token.Check(authorization)
		}
	}
	return g.token.Check(authorization)
}
