package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/flowkit/flowkit/experiments"
)

// plotReproduction draws simulated against published figures on log-log
// axes: a point per simulated cell, labelled, with the line of agreement
// and a ±10% band.
func plotReproduction(path string, e *experiments.Experiment, rep *reproduction) error {
	var pts plotter.XYs
	var labels []string
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range rep.Cells {
		if c.Skipped != "" {
			continue
		}
		pts = append(pts, plotter.XY{X: c.Paper, Y: c.Simulated})
		labels = append(labels, fmt.Sprintf(" %s, %s (%+.1f%%)", c.Row, c.Column, 100*c.Error))
		lo, hi = min(lo, c.Paper, c.Simulated), max(hi, c.Paper, c.Simulated)
	}
	if len(pts) == 0 {
		return nil // nothing to draw; the table says why
	}
	lo, hi = lo/1.5, hi*1.5
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s\n%s", e.Name, e.Title)
	p.X.Label.Text = "paper: " + e.Metric
	p.Y.Label.Text = "simulated: " + e.Metric
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = ticks125{}, ticks125{}
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = lo, hi, lo, hi
	p.Add(plotter.NewGrid())
	for _, k := range []float64{1, 1.1, 1 / 1.1} {
		l, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo * k}, {X: hi, Y: hi * k}})
		if err != nil {
			return err
		}
		l.Color = color.Gray{Y: 90}
		if k != 1 {
			l.Color = color.Gray{Y: 160}
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			if k > 1 {
				p.Legend.Add("±10%", l)
			}
		} else {
			p.Legend.Add("simulated = paper", l)
		}
		p.Add(l)
	}
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	s.GlyphStyle = draw.GlyphStyle{Color: color.RGBA{R: 200, G: 60, B: 30, A: 255}, Radius: vg.Points(4), Shape: draw.CircleGlyph{}}
	p.Add(s)
	ls, err := plotter.NewLabels(plotter.XYLabels{XYs: pts, Labels: labels})
	if err != nil {
		return err
	}
	p.Add(ls)
	p.Legend.Top, p.Legend.Left = true, true
	return savePlot(p, 7*vg.Inch, 6*vg.Inch, path)
}

// ticks125 marks a log axis at 1, 2 and 5 times each power of ten.
type ticks125 struct{}

func (ticks125) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			if v := m * math.Pow(10, e); v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprintf("%g", v)})
			}
		}
	}
	return ts
}
