package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/flowkit/flowkit/units"
)

// A sweep ranks by step time, but a strategy is chosen under a memory
// budget as often as for speed: the memory–time front is the strategies
// that no other beats on both, the fastest within each budget. Going down
// the ranking (step time, then peak memory), an entry is on the front
// exactly when it needs less memory than every entry ranked before it.

// sweepFront returns the feasible entries of a ranked sweep that are on
// its memory–time front, fastest first (and so largest first).
func sweepFront(ranked []sweepEntry) []sweepEntry {
	var front []sweepEntry
	least := int64(math.MaxInt64)
	for _, e := range ranked {
		if e.Error != "" {
			break // the infeasible rank last
		}
		if e.Peak < least {
			front = append(front, e)
			least = e.Peak
		}
	}
	return front
}

// shownName is a strategy as the tables show it: marked "(auto)" where
// the simulator chose some of its keys (mb=auto, layers=auto).
func shownName(e sweepEntry) string {
	if strings.Contains(e.Asked, "=auto") {
		return e.Strategy + " (auto)"
	}
	return e.Strategy
}

// nameWidth is the width of a table's strategy column: 40, or the
// longest name shown.
func nameWidth(entries []sweepEntry) int {
	width := 40
	for _, e := range entries {
		width = max(width, len(shownName(e)))
	}
	return width
}

// frontIndices are the enumeration indices of the front's entries, for
// --json.
func frontIndices(front []sweepEntry) []int {
	out := make([]int, len(front))
	for i, e := range front {
		out[i] = e.Index
	}
	return out
}

// printFront prints the front under the ranking, where it holds more than
// the fastest strategy.
func printFront(w io.Writer, front []sweepEntry) {
	if len(front) < 2 {
		return
	}
	fmt.Fprintf(w, "memory–time front (no strategy is both faster and leaner than these; each the fastest within its memory):\n")
	width := nameWidth(front)
	fmt.Fprintf(w, "%5s  %-*s %10s %12s\n", "", width, "strategy", "step ms", "peak memory")
	for i, e := range front {
		fmt.Fprintf(w, "%5d  %-*s %10.3f %12v\n", i+1, width, shownName(e), float64(e.StepNs)/1e6, units.Bytes(e.Peak))
	}
}

// plotSweep draws a sweep's feasible strategies, peak memory against step
// time, into path (its extension names the format; see savePlot): the
// front joined as a staircase, its strategies numbered as printFront
// numbers them and named in a legend above the points.
func plotSweep(path string, file *sweepFile, front []sweepEntry) error {
	gib := func(b int64) float64 { return float64(b) / float64(units.GiB) }
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	var all plotter.XYs
	lo, hi := math.Inf(1), math.Inf(-1)
	left, right := math.Inf(1), math.Inf(-1)
	for _, e := range file.Entries {
		if e.Error == "" {
			all = append(all, plotter.XY{X: gib(e.Peak), Y: ms(e.StepNs)})
			lo, hi = min(lo, ms(e.StepNs)), max(hi, ms(e.StepNs))
			left, right = min(left, gib(e.Peak)), max(right, gib(e.Peak))
		}
	}
	if len(all) == 0 {
		return fmt.Errorf("--plot %s: no strategy is feasible: nothing to draw", path)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s (%s), batch %d, %d device(s) of %s: %d feasible strategies",
		file.Model, file.DType, file.Batch, file.Devices, file.Cluster, len(all))
	p.X.Label.Text = "peak memory of the fullest device (GiB)"
	if left == right { // every strategy takes the same memory: an axis around it
		p.X.Min, p.X.Max = left*0.9, max(left*1.1, left+1.0/1024)
	}
	p.Y.Label.Text = "simulated step time (ms)"
	p.Add(plotter.NewGrid())
	s, err := plotter.NewScatter(all)
	if err != nil {
		return err
	}
	s.GlyphStyle = draw.GlyphStyle{Color: color.Gray{Y: 150}, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}
	p.Add(s)
	var pts plotter.XYs
	var numbers []string
	for i, e := range front {
		pts = append(pts, plotter.XY{X: gib(e.Peak), Y: ms(e.StepNs)})
		numbers = append(numbers, fmt.Sprintf(" %d", i+1))
	}
	// The front as a staircase: within a budget between two of its
	// strategies, the leaner one's time is the best there is.
	var stairs plotter.XYs
	for i, pt := range pts {
		if i > 0 {
			stairs = append(stairs, plotter.XY{X: pts[i-1].X, Y: pt.Y})
		}
		stairs = append(stairs, pt)
	}
	l, err := plotter.NewLine(stairs)
	if err != nil {
		return err
	}
	red := color.RGBA{R: 200, G: 60, B: 30, A: 255}
	l.Color = red
	p.Add(l)
	fs, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	fs.GlyphStyle = draw.GlyphStyle{Color: red, Radius: vg.Points(4), Shape: draw.CircleGlyph{}}
	p.Add(fs)
	ls, err := plotter.NewLabels(plotter.XYLabels{XYs: pts, Labels: numbers})
	if err != nil {
		return err
	}
	p.Add(ls)
	p.Legend.Add("strategy", s)
	p.Legend.Add("memory–time front", l, fs)
	for i, e := range front {
		p.Legend.Add(fmt.Sprintf("%d  %s: %.3f ms, %v", i+1, e.Strategy, ms(e.StepNs), units.Bytes(e.Peak)))
	}
	p.Legend.Top = true
	// The legend goes above the points: the y axis runs on past the
	// slowest strategy by as much as the legend's lines take of the
	// plot's height.
	lines := float64(len(front) + 2)
	height := 5*vg.Inch + vg.Length(lines)*0.2*vg.Inch
	share := min(0.8, lines*0.2*float64(vg.Inch)/float64(height-vg.Inch)) // of the data area, roughly
	if hi > 4*lo {
		// Times spread over more than a factor of four (a sweep's slowest
		// pipelines): a log axis keeps the front, near the fastest, apart.
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, ticks125{}
		p.Y.Min = lo / 1.05
		p.Y.Max = hi * math.Pow(hi/p.Y.Min, share/(1-share))
	} else {
		span := max(hi-lo, hi*0.05)
		p.Y.Min, p.Y.Max = max(0, lo-span*0.05), hi+span*share/(1-share)
	}
	return savePlot(p, 8*vg.Inch, height, path)
}
