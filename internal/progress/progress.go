// Package progress shows the progress of long work (calibration, searches)
// as a bar on stderr when stderr is a terminal, and nothing otherwise, so
// that logs and scripts see only results.
package progress

import (
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Bar is a progress bar; the zero Bar (stderr not a terminal) shows nothing.
type Bar struct{ bar *progressbar.ProgressBar }

// New returns a bar of total steps, or a spinner if total is −1, described
// by desc.
func New(total int, desc string) *Bar {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return &Bar{}
	}
	return &Bar{bar: progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionClearOnFinish())}
}

// Set reports done steps; the bar finishes when they reach its total.
func (b *Bar) Set(done int) {
	if b.bar == nil {
		return
	}
	_ = b.bar.Set(done)
	if max := b.bar.GetMax(); max >= 0 && done >= max {
		_ = b.bar.Finish()
	}
}

// Finish ends the bar (and clears it).
func (b *Bar) Finish() {
	if b.bar != nil {
		_ = b.bar.Finish()
	}
}
