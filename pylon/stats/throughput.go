package stats

import "math"

// MinPublishSamples is the number of input-throughput samples needed before the mean is
// published (--initial-input-tps bootstraps the distribution with this many).
const MinPublishSamples = 5

// OutputWindowSize is the number of output-throughput samples averaged.
const OutputWindowSize = 8

// Throughput is a running (Welford) distribution of input throughput samples in tokens/s.
// Its published value is sticky: staleness never clears it. The zero value is empty.
type Throughput struct {
	n      uint64
	mean   float64
	m2     float64
	min    float64
	max    float64
	pinned bool
}

// Bootstrap installs tps as a distribution of MinPublishSamples samples of mean tps, so it
// is publishable at once and real samples move it slowly. With pin the published value
// stays tps whatever is added later. A non-finite or non-positive tps is ignored.
func (t *Throughput) Bootstrap(tps float64, pin bool) {
	if !validSample(tps) {
		return
	}
	*t = Throughput{n: MinPublishSamples, mean: tps, min: tps, max: tps, pinned: pin}
}

// Add records one sample; samples ≤ 0 or non-finite are ignored, and so is everything
// once pinned. It reports whether the sample was used.
func (t *Throughput) Add(tps float64) bool {
	if !validSample(tps) || t.pinned {
		return false
	}
	if t.n == 0 {
		t.min, t.max = tps, tps
	}
	t.n++
	d := tps - t.mean
	t.mean += d / float64(t.n)
	t.m2 += d * (tps - t.mean)
	t.min = math.Min(t.min, tps)
	t.max = math.Max(t.max, tps)
	return true
}

// Count is the number of samples (bootstrap included).
func (t *Throughput) Count() uint64 { return t.n }

// Mean is the running mean (0 when empty).
func (t *Throughput) Mean() float64 { return t.mean }

// Variance is the sample variance (0 with fewer than two samples).
func (t *Throughput) Variance() float64 {
	if t.n < 2 {
		return 0
	}
	return t.m2 / float64(t.n-1)
}

// Min and Max are the extreme samples.
func (t *Throughput) Min() float64 { return t.min }

// Max is the largest sample.
func (t *Throughput) Max() float64 { return t.max }

// Published is the value published as last_mean_input_tps: the mean once at least
// MinPublishSamples samples exist, else 0 (unknown).
func (t *Throughput) Published() float64 {
	if t.n < MinPublishSamples {
		return 0
	}
	return t.mean
}

func validSample(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// OutputWindow is the windowed average of the last OutputWindowSize output-throughput
// samples, with the maximum ever observed. The zero value is empty.
type OutputWindow struct {
	samples [OutputWindowSize]float64
	n       int
	next    int
	max     float64
}

// Add records a sample; non-finite or non-positive samples are ignored.
func (w *OutputWindow) Add(tps float64) {
	if !validSample(tps) {
		return
	}
	w.samples[w.next] = tps
	w.next = (w.next + 1) % OutputWindowSize
	w.n = min(w.n+1, OutputWindowSize)
	w.max = math.Max(w.max, tps)
}

// Mean is the window average (0 when empty or cleared).
func (w *OutputWindow) Mean() float64 {
	if w.n == 0 {
		return 0
	}
	var s float64
	for i := range w.n {
		s += w.samples[i]
	}
	return s / float64(w.n)
}

// Max is the largest sample ever observed; clearing keeps it.
func (w *OutputWindow) Max() float64 { return w.max }

// Clear empties the window (stale stats); the maximum is kept.
func (w *OutputWindow) Clear() { w.n, w.next = 0, 0 }
