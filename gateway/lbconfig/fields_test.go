package lbconfig

import "slices"

// Fields returns the JSON fields a detailed entry of a accepts, sorted: the common ones
// plus a's own.
func Fields(a Algorithm) []string {
	if !a.valid() {
		return nil
	}
	fields := append(slices.Clone(commonFields), algorithmFields[a]...)
	slices.Sort(fields)
	return fields
}
