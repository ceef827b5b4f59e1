package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/cost"
)

// The 22B row of Korthikanti et al.'s Table 5, with full recompute and with
// selective recompute and sequence parallelism: compiled, simulated plans
// on 8 modeled A100s, each within 10% of the paper's iteration time,
// written as a table, a plot and a summary. A cell that cannot be
// simulated (in an experiment file of one's own) is reported with its
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

	// An experiment file of one's own, with a cell that cannot compile.
	own := filepath.Join(dir, "mine.yaml")
	require.NoError(t, os.WriteFile(own, []byte(ownExperiment+`
  - {name: odd, model: "gpt:layers=2,hidden=64,heads=4,seq=16,vocab=256", batch: 4, strategy: "tp=3", paper: {plain: {seconds: 0.001}}}
`), 0o644))
	out, err = run(t, "reproduce", own, "--out", dir)
	require.ErrorContains(t, err, "1 of 2 cells not simulated")
	require.Contains(t, out, "| fits | plain | tp=2,mb=2 | 2 | 4 | 0.00 |")
	require.Contains(t, out, "not simulated: zoo: gpt:layers=2,hidden=64,heads=4,seq=16,vocab=256: tp=3 does not divide")
	require.FileExists(t, filepath.Join(dir, "table.md"))
	_, err = run(t, "reproduce", filepath.Join(dir, "none.yaml"))
	require.ErrorContains(t, err, "none.yaml: no such file")

	_, err = run(t, "reproduce", "korthikanti2022", "--rows", "3B")
	require.ErrorContains(t, err, `no row "3B" (rows: 22B, 175B, 530B, 1T)`)
	_, err = run(t, "reproduce", "nosuch")
	require.ErrorContains(t, err, "korthikanti2022")

	// A bad calibration is refused before any cell compiles, and nothing
	// is written.
	badCalib := filepath.Join(dir, "calib.json")
	require.NoError(t, os.WriteFile(badCalib, []byte(`{"version":`), 0o644))
	none := filepath.Join(dir, "none")
	out, err = run(t, "reproduce", "korthikanti2022", "--rows", "22B", "--calib", badCalib, "--out", none)
	require.ErrorContains(t, err, "--calib: cost: bad calibration file: "+badCalib)
	require.NotContains(t, out, "not simulated")
	require.NoDirExists(t, none)
	// So is one that holds none of the experiment's devices (a CPU
	// calibration, for A100s): it would change nothing.
	cal := cost.NewCalibration()
	cal.Devices["cpu/2"] = &cost.DeviceCalibration{Ops: map[string]*cost.OpFit{}}
	require.NoError(t, cal.WriteFile(badCalib))
	_, err = run(t, "reproduce", "korthikanti2022", "--rows", "22B", "--calib", badCalib, "--out", none)
	require.ErrorContains(t, err, "--calib "+badCalib+" holds none of cluster dgx-a100-80g's device types (A100-SXM4-80GB; it holds cpu/2)")
	require.NoDirExists(t, none)
}

// ownExperiment is an experiment file of one's own with one row that
// compiles; the tests add rows.
const ownExperiment = `title: a table of mine
source: nowhere
metric: iteration time (s)
optimizer: sgd
cluster: dgx-a100
columns:
  - {name: plain, strategy: "mb=2"}
rows:
  - {name: fits, model: "gpt:layers=2,hidden=64,heads=4,seq=16,vocab=256", batch: 4, strategy: "tp=2", paper: {plain: {seconds: 0.001}}}`

// An experiment file whose optimizer, model or strategies no cell could
// compile with is refused when it is read, naming the file, line and
// field: before any cell compiles, and with nothing written.
func TestReproduceRefusesBadFileFirst(t *testing.T) {
	dir := t.TempDir()
	good := ownExperiment + `
  - {name: also, model: "gpt:layers=2,hidden=64,heads=4,seq=16,vocab=256", batch: 4, strategy: "dp=2", paper: {plain: {seconds: 0.001}}}
`
	own := filepath.Join(dir, "mine.yaml")
	for _, c := range []struct{ from, to, want string }{
		{"optimizer: sgd", "optimizer: lion", own + `:4: optimizer: graph: unknown optimizer "lion" (want sgd, adam or adamw)`},
		{`strategy: "mb=2"`, `strategy: "mb=2,recompute=most"`, own + `:9: rows[0] (fits): strategy in column "plain" (line 7, strategy "mb=2,recompute=most"): plans: strategy "tp=2,mb=2,recompute=most": recompute=most: want none, selective or full`},
		{`model: "gpt:layers=2,hidden=64,heads=4,seq=16,vocab=256", batch: 4, strategy: "dp=2"`, `model: "gpt3:layers=2", batch: 4, strategy: "dp=2"`, own + `:10: rows[1] (also): model: zoo: unknown model "gpt3:layers=2" (known: `},
	} {
		bad := strings.Replace(good, c.from, c.to, 1)
		require.NotEqual(t, good, bad)
		require.NoError(t, os.WriteFile(own, []byte(bad), 0o644))
		out := filepath.Join(dir, "out")
		log, err := run(t, "reproduce", own, "--out", out)
		require.Error(t, err)
		require.True(t, strings.HasPrefix(err.Error(), c.want), "got %v, want %s…", err, c.want)
		require.NotContains(t, log, "simulated")
		require.NoDirExists(t, out)
	}
}
