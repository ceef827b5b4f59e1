package search

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
)

// With a pool of several device types, each pipeline is also tried with
// each placement of its stages, data parallelism alone is not, and a
// placed pipeline's cut is searched on its own devices: the host CPU's
// stage, first, gets the fewest layers.
func TestSweepPlacements(t *testing.T) {
	c, err := topology.Resolve("h200-host")
	require.NoError(t, err)
	pool, err := plans.DevicesFromCluster(c, len(c.Devices), false)
	require.NoError(t, err)
	space := Space{Devices: 2, MaxMB: 2, Uneven: true}
	plain, err := Strategies(64, space)
	require.NoError(t, err)
	space.Pool = pool
	placed, err := Strategies(64, space)
	require.NoError(t, err)

	pipelines := 0
	for _, st := range plain {
		if st.PP > 1 {
			pipelines++
		}
	}
	require.Positive(t, pipelines)
	var found []plans.Strategy
	for _, st := range placed {
		if st.Place != nil {
			require.Equal(t, 2, st.PP, st.String())
			// H200 then cpu is the pool's order, and two stages of one
			// type do not fit one H200 or one CPU device: cpu then H200
			// is the one placement.
			require.Equal(t, []string{"cpu", "H200"}, st.Place, st.String())
			found = append(found, st)
		}
	}
	require.Len(t, found, pipelines, "each pipeline once more, placed")
	require.Len(t, placed, len(plain)+pipelines)

	cfg := autoConfig(t, "mnist-cnn", "h200-host", "single", 64, false)
	cfg.Devices = pool
	entries, err := Sweep(cfg, catalogModel(t, "h200-host"), found, Options{})
	require.NoError(t, err)
	cut := 0
	for _, e := range entries {
		require.NoError(t, e.Err, e.Asked.String())
		require.Equal(t, e.Asked.Place, e.Strategy.Place, "the resolved strategy keeps its placement")
		if e.Asked.AutoLayers {
			cut++
			require.Less(t, e.Strategy.Layers[0], e.Strategy.Layers[1], "%s: the CPU's stage has fewer layers", e.Strategy)
		}
	}
	require.Positive(t, cut)
	t.Logf("%d placed strategies, %d cuts searched; best %s", len(entries), cut, entries[0].Strategy)
}
