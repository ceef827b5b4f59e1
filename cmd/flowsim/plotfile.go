package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

// plotFormats are the image formats savePlot writes, by extension.
var plotFormats = []string{".png", ".svg", ".pdf", ".eps", ".jpg", ".jpeg", ".tif", ".tiff"}

// checkPlotPath says whether savePlot can write an image to path, by its
// extension, before any work is done.
func checkPlotPath(flag, path string) error {
	if !slices.Contains(plotFormats, strings.ToLower(filepath.Ext(path))) {
		return fmt.Errorf("%s %s: want a file ending in %s", flag, path, strings.Join(plotFormats, ", "))
	}
	return nil
}

// savePlot draws p, w by h, into path in the format its extension names.
// The image is drawn in memory first, so that a drawing that fails
// leaves no file, or an earlier one, in place of an empty or partial one.
func savePlot(p *plot.Plot, w, h vg.Length, path string) error {
	wt, err := p.WriterTo(w, h, strings.ToLower(strings.TrimPrefix(filepath.Ext(path), ".")))
	if err != nil {
		return fmt.Errorf("drawing %s: %w", path, err)
	}
	var b bytes.Buffer
	if _, err := wt.WriteTo(&b); err != nil {
		return fmt.Errorf("drawing %s: %w", path, err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("drawing %s: %w", path, err)
	}
	return nil
}
