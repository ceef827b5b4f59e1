package plans

import (
	"fmt"
	"math"

	"github.com/flowkit/flowkit/graph"
)

// placeStages assigns every node of a training graph to one of pp pipeline
// stages and returns the stage by node ID. The forward pass is cut at layer
// boundaries (before a node that reads a weight) so as to minimize the
// largest stage's forward FLOPs; a backward node goes with the forward node
// it differentiates, an update with its weight.
func placeStages(g *graph.Graph, loss *graph.Tensor, pp int) ([]int, error) {
	stage := make([]int, len(g.Nodes))
	var fwd []*graph.Node
	for _, n := range g.Nodes {
		if n.Phase == graph.Forward {
			fwd = append(fwd, n)
		}
	}
	if pp > 1 {
		var cands []int // forward positions a stage may start at
		for i, n := range fwd {
			if i == 0 {
				continue
			}
			for _, in := range n.Inputs {
				if in.Kind == graph.Param {
					cands = append(cands, i)
					break
				}
			}
		}
		if len(cands) < pp-1 {
			return nil, fmt.Errorf("%w: pp=%d needs %d layer boundaries, the model has %d", ErrInfeasible, pp, pp-1, len(cands))
		}
		prefix := make([]float64, len(fwd)+1)
		for i, n := range fwd {
			prefix[i+1] = prefix[i] + float64(n.Cost().FLOPs)
		}
		cuts := bestCuts(cands, prefix, pp)
		s := 0
		for i, n := range fwd {
			for s < len(cuts) && i >= cuts[s] {
				s++
			}
			stage[n.ID] = s
		}
	}
	weightStage := map[int]int{}
	for _, n := range fwd {
		for _, in := range n.Inputs {
			if _, ok := weightStage[in.ID]; !ok && in.Persistent() {
				weightStage[in.ID] = stage[n.ID]
			}
		}
	}
	lossStage := stage[loss.Producer.ID]
	for _, n := range g.Nodes {
		switch {
		case n.Phase == graph.Backward && n.Origin != nil:
			stage[n.ID] = stage[n.Origin.ID]
		case n.Phase == graph.Backward:
			stage[n.ID] = lossStage
		case n.Phase == graph.Update:
			stage[n.ID] = weightStage[n.Inputs[0].ID]
		}
	}
	return stage, nil
}

// bestCuts chooses pp−1 of the candidate positions minimizing the largest
// segment sum (prefix holds the running sums), by dynamic programming; ties
// go to the earliest cuts.
func bestCuts(cands []int, prefix []float64, pp int) []int {
	n := len(prefix) - 1
	pos := append([]int{0}, cands...)
	// best[k][i]: the least largest segment covering [0, pos[i]) with k cuts
	// made, the last at pos[i].
	best := make([][]float64, pp)
	from := make([][]int, pp)
	for k := range best {
		best[k] = make([]float64, len(pos))
		from[k] = make([]int, len(pos))
		for i := range best[k] {
			best[k][i] = math.Inf(1)
		}
	}
	best[0][0] = 0
	for k := 1; k < pp; k++ {
		for i := 1; i < len(pos); i++ {
			for j := 0; j < i; j++ {
				v := math.Max(best[k-1][j], prefix[pos[i]]-prefix[pos[j]])
				if v < best[k][i] {
					best[k][i], from[k][i] = v, j
				}
			}
		}
	}
	last, bestV := 0, math.Inf(1)
	for i := 1; i < len(pos); i++ {
		if v := math.Max(best[pp-1][i], prefix[n]-prefix[pos[i]]); v < bestV {
			last, bestV = i, v
		}
	}
	cuts := make([]int, pp-1)
	for k, i := pp-1, last; k >= 1; k-- {
		cuts[k-1] = pos[i]
		i = from[k][i]
	}
	return cuts
}
