package wire

import "strconv"

// FormatDispatchSeq is the x-switchyard-dispatch-seq value for dispatch seq of gateway
// (the gateway appends the same bytes in place; tests build the value with this).
func FormatDispatchSeq(gatewayID string, seq uint64) string {
	return gatewayID + "/" + strconv.FormatUint(seq, 10)
}

// ParseRegistration decodes and validates a registration body for backend id pathID with
// DefaultLimits (see Limits.ParseRegistration).
func ParseRegistration(pathID string, body []byte) (Registration, error) {
	return DefaultLimits().ParseRegistration(pathID, body)
}
