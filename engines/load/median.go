package load

import "slices"

// MedianTPS is the median of the valid throughputs in tps (sorted in place, invalid values
// left at the end); 0 when none is valid. It is what routing assumes for an engine that
// has not measured its own throughput yet: a typical member of its fleet, neither the
// best nor the worst.
func MedianTPS(tps []float64) float64 {
	n := 0
	for _, v := range tps {
		if ValidTPS(v) {
			tps[n] = v
			n++
		}
	}
	if n == 0 {
		return 0
	}
	valid := tps[:n]
	slices.Sort(valid)
	if n%2 == 1 {
		return valid[n/2]
	}
	return (valid[n/2-1] + valid[n/2]) / 2
}
