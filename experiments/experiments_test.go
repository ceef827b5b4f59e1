package experiments

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
)

// Every built-in experiment parses, names models the zoo builds, strategies
// that parse (but for options still to come), and a cluster preset; and a
// published utilization agrees with the published time: the model's
// training FLOPs over the time, the devices and their peak. That catches a
// figure transcribed wrong.
func TestBuiltinExperimentsAreConsistent(t *testing.T) {
	require.NotEmpty(t, Names())
	for _, name := range Names() {
		e, err := Load(name)
		require.NoError(t, err)
		cluster, err := topology.Preset(e.Cluster)
		require.NoError(t, err, "%s: cluster", name)
		dtype, err := zoo.ParseDType(e.DType)
		require.NoError(t, err)
		checked := 0
		for _, r := range e.Rows {
			st, err := plans.ParseStrategy(r.Strategy, r.Batch)
			require.NoError(t, err, "%s %s", name, r.Name)
			m, err := zoo.Build(r.Model, zoo.Config{Batch: r.Batch, Train: true, DType: dtype})
			require.NoError(t, err, "%s %s", name, r.Name)
			require.NoError(t, m.Graph.Minimize(m.Loss, graph.SGD{LR: 0.01}))
			flops := float64(m.Graph.Cost().FLOPs)
			rate, ok := cluster.Devices[0].Spec.Peak.PeakFor(dtype.String())
			require.True(t, ok)
			peak := float64(rate)
			for col, p := range r.Paper {
				if p.MFU == 0 {
					continue
				}
				mfu := flops / (p.Seconds * float64(st.Devices()) * peak)
				require.InDelta(t, p.MFU, mfu, 0.005, "%s %s %s: %.4g FLOPs in %g s on %d devices", name, r.Name, col, flops, p.Seconds, st.Devices())
				checked++
			}
		}
		t.Logf("%s: %d rows, %d published utilizations agree with their times", name, len(e.Rows), checked)
	}
}

// Bad files are refused with the file, the line and the field.
func TestParseRejects(t *testing.T) {
	good := `title: t
source: s
metric: iteration time (s)
optimizer: adam
cluster: dgx-a100
columns:
  - {name: a, strategy: "recompute=full"}
rows:
  - name: r
    model: mlp
    batch: 4
    strategy: dp=2
    paper:
      a: {seconds: 1.5}
`
	_, err := Parse("x.yaml", "x", []byte(good))
	require.NoError(t, err)
	for _, c := range []struct{ from, to, want string }{
		{"batch: 4", "batch: 0", "x.yaml:9: rows[0] (r): batch: want ≥ 1, got 0"},
		{"a: {seconds: 1.5}", "b: {seconds: 1.5}", `x.yaml:9: rows[0] (r): paper: "b" is no column (columns: a)`},
		{"a: {seconds: 1.5}", "a: {seconds: -1}", "x.yaml:9: rows[0] (r): paper: a: want seconds > 0"},
		{"a: {seconds: 1.5}", "a: {second: 1.5}", "x.yaml: yaml: unmarshal errors:\n  line 14: field second not found"},
		{"cluster: dgx-a100\n", "", "x.yaml:1: cluster: missing"},
		{"    model: mlp\n", "", "x.yaml:9: rows[0] (r): model: missing"},
		{"title: t", "title: [", "x.yaml: yaml:"},
	} {
		bad := []byte(strings.Replace(good, c.from, c.to, 1))
		_, err := Parse("x.yaml", "x", bad)
		require.ErrorContains(t, err, c.want, "%q → %q", c.from, c.to)
	}
	_, err = Load("nosuch")
	require.ErrorIs(t, err, ErrUnknown)
	require.ErrorContains(t, err, "korthikanti2022")
}

func FuzzParse(f *testing.F) {
	for _, name := range Names() {
		data, err := files.ReadFile(name + "/experiment.yaml")
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte("rows: [{name: a, batch: -1}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := Parse("f.yaml", "f", data)
		if err != nil {
			return
		}
		require.NotEmpty(t, e.Rows)
		require.NotEmpty(t, e.Columns)
		for _, r := range e.Rows {
			for _, p := range r.Paper {
				require.Greater(t, p.Seconds, 0.0)
			}
		}
	})
}
