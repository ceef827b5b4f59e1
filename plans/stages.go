package plans

import (
	"fmt"
	"math"
	"slices"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/graph/zoo"
)

// placeStages assigns every node of a training graph to one of pp pipeline
// stages and returns the stage by node ID. The forward pass is cut at layer
// boundaries (see layerStarts):
// by layers, when given, stage s taking the next layers[s]; else so as to
// minimize the largest stage's forward FLOPs. A backward node goes with the
// forward node it differentiates, an update with its weight. Errors call
// the stages name (pp=4, or pp=2 × vpp=2 (4 stages)).
func placeStages(g *graph.Graph, loss *graph.Tensor, pp int, layers []int, name string) ([]int, error) {
	stage := make([]int, len(g.Nodes))
	fwd := forwardNodes(g)
	if pp > 1 {
		starts := layerStarts(fwd)
		var cuts []int
		switch {
		case layers != nil:
			if len(layers) != pp || sum(layers) != len(starts)+1 || slices.Min(layers) < 1 {
				return nil, fmt.Errorf("%w: layers=%s: the model has %d layers, to be split into %s stages of at least one",
					ErrInfeasible, FormatCounts(layers), len(starts)+1, name)
			}
			n := 0
			for _, l := range layers[:pp-1] {
				n += l
				cuts = append(cuts, starts[n-1])
			}
		case len(starts) < pp-1:
			return nil, fmt.Errorf("%w: %s needs %d layer boundaries, the model has %d", ErrInfeasible, name, pp-1, len(starts))
		default:
			prefix := make([]float64, len(fwd)+1)
			for i, n := range fwd {
				prefix[i+1] = prefix[i] + float64(n.Cost().FLOPs)
			}
			cuts = bestCuts(starts, prefix, pp)
		}
		s := 0
		for i, n := range fwd {
			for s < len(cuts) && i >= cuts[s] {
				s++
			}
			stage[n.ID] = s
		}
	}
	withReaders(g, fwd, stage)
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

// withReaders moves each forward node that computes from weights alone
// (a weight's TPCopy under sequence parallelism, a cast of one) to the
// first stage that reads its outputs: where it sits in the pass may be
// before a cut its readers are after, and a weight is not sent from stage
// to stage.
func withReaders(g *graph.Graph, fwd []*graph.Node, stage []int) {
	weightsOnly := make([]bool, len(g.Nodes))
	for _, n := range fwd {
		weightsOnly[n.ID] = len(n.Inputs) > 0
		for _, in := range n.Inputs {
			if !in.Persistent() && (in.Producer == nil || !weightsOnly[in.Producer.ID]) {
				weightsOnly[n.ID] = false
			}
		}
	}
	consumers := g.Consumers()
	for i := len(fwd) - 1; i >= 0; i-- { // readers first: chains move whole
		n := fwd[i]
		if !weightsOnly[n.ID] {
			continue
		}
		first := -1
		for _, out := range n.Outputs {
			for _, r := range consumers[out.ID] {
				if r.Phase == graph.Forward && (first < 0 || stage[r.ID] < first) {
					first = stage[r.ID]
				}
			}
		}
		if first >= 0 {
			stage[n.ID] = first
		}
	}
}

// forwardNodes are the forward pass's nodes, in order.
func forwardNodes(g *graph.Graph) []*graph.Node {
	var fwd []*graph.Node
	for _, n := range g.Nodes {
		if n.Phase == graph.Forward {
			fwd = append(fwd, n)
		}
	}
	return fwd
}

// layerStarts are the positions in the forward pass where a layer other
// than the first starts: where the model's builder declared one
// (graph.StartLayer), else at a node reading a weight matrix or filter (not
// a bias).
func layerStarts(fwd []*graph.Node) []int {
	var starts []int
	if slices.ContainsFunc(fwd, func(n *graph.Node) bool { return n.LayerStart }) {
		for i, n := range fwd {
			if i > 0 && n.LayerStart {
				starts = append(starts, i)
			}
		}
		return starts
	}
	for i, n := range fwd {
		if i == 0 {
			continue
		}
		for _, in := range n.Inputs {
			if in.Kind == graph.Param && len(in.Spec.Shape) >= 2 {
				starts = append(starts, i)
				break
			}
		}
	}
	return starts
}

// Layers is the number of layers of a zoo model (name with size options),
// as pipeline stages count them (see Strategy.Layers).
func Layers(model string) (int, error) {
	m, err := zoo.Build(model, zoo.Config{Batch: 1})
	if err != nil {
		return 0, err
	}
	return len(layerStarts(forwardNodes(m.Graph))) + 1, nil
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// bestCuts chooses pp−1 of the candidate positions so that the largest
// segment sum (prefix holds the running sums) is least, and among those the
// sum of squared segment sums (no stage left nearly empty), by dynamic
// programming over (cuts made, last cut).
func bestCuts(cands []int, prefix []float64, pp int) []int {
	type score struct{ max, sq float64 }
	less := func(a, b score) bool {
		const tol = 1e-9
		if math.Abs(a.max-b.max) > tol*math.Max(a.max, b.max) {
			return a.max < b.max
		}
		return a.sq < b.sq
	}
	add := func(a score, seg float64) score { return score{math.Max(a.max, seg), a.sq + seg*seg} }
	n := len(prefix) - 1
	pos := append([]int{0}, cands...)
	inf := score{math.Inf(1), math.Inf(1)}
	best := make([][]score, pp)
	from := make([][]int, pp)
	for k := range best {
		best[k] = make([]score, len(pos))
		from[k] = make([]int, len(pos))
		for i := range best[k] {
			best[k][i] = inf
		}
	}
	best[0][0] = score{}
	for k := 1; k < pp; k++ {
		for i := 1; i < len(pos); i++ {
			for j := range i {
				if best[k-1][j] == inf {
					continue
				}
				if v := add(best[k-1][j], prefix[pos[i]]-prefix[pos[j]]); less(v, best[k][i]) {
					best[k][i], from[k][i] = v, j
				}
			}
		}
	}
	last, bestV := 0, inf
	for i := 1; i < len(pos); i++ {
		if best[pp-1][i] == inf {
			continue
		}
		if v := add(best[pp-1][i], prefix[n]-prefix[pos[i]]); less(v, bestV) {
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
