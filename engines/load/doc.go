// Package load models an engine's load as routing sees it and the estimators shared by the
// gateway and the pylon: effective queue delay (with the free-slot rule), prefill time,
// TTFT components, comparators, input-work seconds and reservation arithmetic.
//
// All times are float64 milliseconds (Millis) so "never" is +Inf. The package is pure: no
// clock, no I/O, no logging.
package load
