package report

import (
	"fmt"
	"io"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

const (
	chartWidth  = 8 * vg.Inch
	chartHeight = 4.5 * vg.Inch
)

// Chart file names.
const (
	FileTTFTCDF      = "ttft-cdf.png"
	FileCacheHitRate = "cache-hit-rate.png"
)

// TimelineFile is the requests-per-backend chart file of one algorithm.
func TimelineFile(algorithm string) string { return "backends-" + fileSafe(algorithm) + ".png" }

func fileSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'
		if !ok {
			b[i] = '-'
		}
	}
	return string(b)
}

// Charts lists the charts written for runs, with descriptions for report.md.
func Charts(runs []Run) []Chart {
	out := make([]Chart, 0, 2+len(runs))
	out = append(out,
		Chart{File: FileTTFTCDF, Title: "TTFT CDF per algorithm", Description: "fraction of successful requests (y) whose time to first token is at most x ms; curves further left and steeper are better"},
		Chart{File: FileCacheHitRate, Title: "Cache-hit rate per algorithm", Description: "share of requests whose prompt prefix was already in the serving engine's KV cache (x-kv-cache-hit), and the share of input tokens reused"},
	)
	for i := range runs {
		a := runs[i].Summary.Algorithm
		out = append(out, Chart{
			File: TimelineFile(a), Title: "Requests per backend over time: " + a,
			Description: "requests sent per second (y) to each backend over the run (x, seconds since start), by serving backend",
		})
	}
	return out
}

// legendGap separates the plot area from its legend, drawn to the right of it (outside
// the plot area, so that it never hides a curve).
const legendGap = vg.Length(10)

func writePNG(w io.Writer, p *plot.Plot) error {
	c, err := draw.NewFormattedCanvas(chartWidth, chartHeight, "png")
	if err != nil {
		return fmt.Errorf("render chart: %w", err)
	}
	dc := draw.New(c)
	leg := p.Legend
	p.Legend = plot.NewLegend() // empty: the plot draws none
	leg.Left, leg.Top, leg.XOffs, leg.YOffs = true, true, 0, 0
	width := leg.Rectangle(dc).Size().X
	if width > 0 {
		width += 2 * legendGap
	}
	p.Draw(draw.Crop(dc, 0, -width, 0, 0))
	if width > 0 {
		// Top-aligned with the plot area (below the title).
		top := p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding
		leg.Draw(draw.Crop(dc, chartWidth-width+legendGap, 0, 0, -top))
	}
	if _, err := c.WriteTo(w); err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	return nil
}

// TTFTCDF writes the TTFT CDF per algorithm as PNG.
func TTFTCDF(w io.Writer, runs []Run) error {
	p := plot.New()
	p.Title.Text = "TTFT CDF per algorithm"
	p.X.Label.Text = "TTFT (ms)"
	p.Y.Label.Text = "fraction of successful requests"
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	for i := range runs {
		var ttft []float64
		for j := range runs[i].Records {
			r := &runs[i].Records[j]
			if r.OK() && r.OutputTokens > 0 {
				ttft = append(ttft, float64(r.TTFT)/float64(time.Millisecond))
			}
		}
		if len(ttft) == 0 {
			continue
		}
		slices.Sort(ttft)
		pts := make(plotter.XYs, 0, len(ttft)+1)
		pts = append(pts, plotter.XY{X: ttft[0], Y: 0})
		for k, v := range ttft {
			pts = append(pts, plotter.XY{X: v, Y: float64(k+1) / float64(len(ttft))})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("ttft cdf: %w", err)
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(runs[i].Summary.Algorithm, l)
	}
	return writePNG(w, p)
}

// CacheHitRates writes the cache-hit and input-reuse rates per algorithm as bars.
func CacheHitRates(w io.Writer, runs []Run) error {
	p := plot.New()
	p.Title.Text = "Prefix cache per algorithm"
	p.Y.Label.Text = "rate (%)"
	p.Y.Min, p.Y.Max = 0, 100
	names := make([]string, len(runs))
	hits := make(plotter.Values, len(runs))
	reuse := make(plotter.Values, len(runs))
	for i := range runs {
		s := &runs[i].Summary
		names[i] = s.Algorithm
		if s.Cache.HitRate != nil {
			hits[i] = 100 * *s.Cache.HitRate
		}
		if s.Cache.InputReuseRate != nil {
			reuse[i] = 100 * *s.Cache.InputReuseRate
		}
	}
	const width = vg.Length(18)
	for k, series := range []struct {
		name string
		v    plotter.Values
	}{{"cache-hit rate", hits}, {"input reuse rate", reuse}} {
		b, err := plotter.NewBarChart(series.v, width)
		if err != nil {
			return fmt.Errorf("cache chart: %w", err)
		}
		b.Color = plotutil.Color(k)
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(k)-0.5) * width
		p.Add(b)
		p.Legend.Add(series.name, b)
	}
	p.NominalX(names...)
	return writePNG(w, p)
}

// Timeline writes requests per second per backend over the run of one algorithm, each
// backend labelled with its profile (profiles: backend id → profile name, may be nil).
// Requests without a backend (failures before routing) are shown as "unrouted".
func Timeline(w io.Writer, run *Run, bucket time.Duration, profiles map[string]string) error {
	if bucket <= 0 {
		bucket = time.Second
	}
	counts := map[string][]float64{}
	var order []string
	for _, b := range run.Summary.Backends {
		order = append(order, b.ID)
		counts[b.ID] = nil
	}
	var last int
	for i := range run.Records {
		r := &run.Records[i]
		id := r.Backend
		if id == "" {
			id = "unrouted"
		}
		if _, ok := counts[id]; !ok {
			order = append(order, id)
		}
		k := int(r.Sent / bucket)
		c := counts[id]
		for len(c) <= k {
			c = append(c, 0)
		}
		c[k]++
		counts[id] = c
		last = max(last, k)
	}
	p := plot.New()
	p.Title.Text = "Requests per backend over time: " + run.Summary.Algorithm
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = fmt.Sprintf("requests per %v", bucket)
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	for i, id := range order {
		pts := make(plotter.XYs, last+1)
		for k := range pts {
			pts[k].X = (float64(k) + 0.5) * bucket.Seconds()
			if k < len(counts[id]) {
				pts[k].Y = counts[id][k]
			}
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("timeline: %w", err)
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(backendLabel(profiles, id), l, s)
	}
	return writePNG(w, p)
}
