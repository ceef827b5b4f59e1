package plans

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
)

// A node that computes from weights alone (here sequence parallelism's
// TPCopy of a replicated norm weight, which the builder adds before the
// cut its reader is after) goes with its reader: compiling once sent the
// weight from stage to stage and failed (a panic, before that was an
// error).
func TestWeightOnlyNodesGoWithTheirReaders(t *testing.T) {
	const model = "gpt:layers=1,hidden=64,heads=4,seq=16,vocab=128"
	for _, strategy := range []string{"tp=2,sp=on,pp=2", "tp=2,sp=on,pp=3", "tp=2,sp=on,pp=2,layers=5:2", "tp=2,pp=2"} {
		st, err := ParseStrategy(strategy, 16)
		require.NoError(t, err)
		p, err := Compile(Config{Model: model, Batch: 16, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(st.Devices(), 0)})
		require.NoError(t, err, strategy)
		_, err = p.Deps()
		require.NoError(t, err, strategy)
		for _, task := range p.Tasks {
			if task.Kind != Transfer {
				continue
			}
			for _, u := range task.Reads {
				require.False(t, p.Registers[u.Reg].Persistent, "%s: %s sends a weight between stages", strategy, task.Name)
			}
		}

		m, err := zoo.Build(model, zoo.Config{Batch: 16, Train: true, TP: 2, SP: st.SP})
		require.NoError(t, err)
		require.NoError(t, m.Graph.Minimize(m.Loss, graph.SGD{LR: 0.1}))
		stage, err := placeStages(m.Graph, m.Loss, st.PP, st.Layers, "pp")
		require.NoError(t, err)
		consumers := m.Graph.Consumers()
		for _, n := range forwardNodes(m.Graph) {
			fromWeights := len(n.Inputs) > 0
			for _, in := range n.Inputs {
				fromWeights = fromWeights && in.Persistent()
			}
			if !fromWeights {
				continue
			}
			for _, out := range n.Outputs {
				for _, r := range consumers[out.ID] {
					if r.Phase == graph.Forward {
						require.LessOrEqual(t, stage[n.ID], stage[r.ID], "%s: %s (stage %d) read by %s (stage %d)", strategy, n.Name, stage[n.ID], r.Name, stage[r.ID])
					}
				}
			}
		}
	}
}
