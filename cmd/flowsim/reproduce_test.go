package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The 22B row of Korthikanti et al.'s Table 5, with full recompute and with
// selective recompute and sequence parallelism: compiled, simulated plans
// on 8 modeled A100s, each within 10% of the paper's iteration time,
// written as a table, a plot and a summary. A cell that cannot be
// simulated (the 1T row: a plan too large to list) is reported with its
// reason, the files are still written, and the command fails.
func TestReproduce(t *testing.T) {
	dir := t.TempDir()
	out, err := run(t, "reproduce", "korthikanti2022", "--rows", "22B", "--out", dir)
	require.NoError(t, err, out)
	require.Contains(t, out, "| 22B | full recompute | tp=8,mbs=1,recompute=full | 8 | 4 | 1.42 |")
	require.Contains(t, out, "| 22B | present work | tp=8,mbs=1,recompute=selective,sp=on | 8 | 4 | 1.10 |")
	var rep reproduction
	data, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &rep))
	require.Len(t, rep.Cells, 2)
	for _, c := range rep.Cells {
		require.Empty(t, c.Skipped)
		require.Equal(t, 8, c.Devices)
		require.Less(t, math.Abs(c.Error), 0.10, "%s: simulated %.3f s, paper %.2f s", c.Column, c.Simulated, c.Paper)
	}
	full, present := rep.Cells[0], rep.Cells[1]
	require.Less(t, present.Simulated, full.Simulated, "selective recompute and sequence parallelism are faster")
	require.InDelta(t, present.PaperMFU*present.Paper/present.Simulated, present.MFU, 0.005, "utilization scales with the time")
	for _, f := range []string{"table.md", "plot.svg"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		require.Positive(t, st.Size())
	}

	out, err = run(t, "reproduce", "korthikanti2022", "--rows", "1T", "--columns", "full recompute", "--out", dir)
	require.ErrorContains(t, err, "1 of 1 cells not simulated")
	require.Contains(t, out, "not simulated: plans: infeasible strategy: 28867112 firings per iteration")
	require.FileExists(t, filepath.Join(dir, "table.md"))

	_, err = run(t, "reproduce", "korthikanti2022", "--rows", "3B")
	require.ErrorContains(t, err, `no row "3B" (rows: 22B, 175B, 530B, 1T)`)
	_, err = run(t, "reproduce", "nosuch")
	require.ErrorContains(t, err, "korthikanti2022")
}
