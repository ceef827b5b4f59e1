package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/topology"
)

var update = flag.Bool("update", false, "rewrite the golden digests under testdata/")

// The simulator's traces do not move when its speed does: plans compiled
// as the reproduced tables compile theirs (one rank and one replica
// standing for their groups) on DGX A100 nodes whose NICs and NVSwitches
// their collectives and transfers share, priced by the cost model, give
// the traces recorded in testdata/traces.golden (a SHA-256 of every event,
// and the step), bit for bit. -update rewrites it, for a change of the
// model.
func TestTracesGolden(t *testing.T) {
	model := "gpt:layers=8,hidden=256,heads=8,seq=128,vocab=1024"
	var got strings.Builder
	for _, k := range []struct{ cluster, strategy string }{
		{"dgx-a100-80gx4", "dp=4,tp=8,mbs=1"},
		{"dgx-a100-80gx4", "dp=2,tp=4,pp=4,mbs=1,recompute=full"},
		{"dgx-a100-80gx4", "dp=4,pp=8,mbs=1"},
		{"dgx-a100-80gx4", "tp=8,pp=4,mbs=1,sp=on,recompute=selective"},
		{"mixed-a100-v100", "dp=2,tp=4,pp=2,mb=2"}, // one NIC per node: transfers and all-reduces share it
	} {
		c, err := topology.Resolve(k.cluster)
		require.NoError(t, err)
		p := compileOn(t, c, model, k.strategy, 32, graph.Adam{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, true, true)
		m := CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(c)}
		tr, err := Simulate(p, m, 3)
		require.NoError(t, err, k.strategy)
		step, err := tr.StepTime(1)
		require.NoError(t, err, k.strategy)
		h := sha256.New()
		for _, e := range tr.Events {
			require.NoError(t, binary.Write(h, binary.LittleEndian, e))
		}
		fmt.Fprintf(&got, "%s %s: %d events, step %v, sha256 %x\n", k.cluster, k.strategy, len(tr.Events), step, h.Sum(nil))
	}
	path := filepath.Join("testdata", "traces.golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got.String()), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), got.String())
}
