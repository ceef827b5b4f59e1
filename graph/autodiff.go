package graph

import (
	"fmt"
)

// Backward appends the backward pass of loss, a scalar, to g and returns
// the gradient of loss with respect to each tensor of wrt, in order.
// Gradients of a tensor read by several nodes are summed. It fails if an op
// on a path from wrt to loss has no gradient rule, or if loss does not
// depend on one of wrt (ErrNoGradient).
func (g *Graph) Backward(loss *Tensor, wrt []*Tensor) ([]*Tensor, error) {
	if g.err != nil {
		return nil, g.err
	}
	if loss == nil || len(loss.Spec.Shape) != 0 || !loss.Spec.DType.IsFloat() {
		return nil, fmt.Errorf("graph: backward: loss must be a float scalar, got %v", loss)
	}
	prev := g.phase
	g.SetPhase(Backward)
	defer func() { g.SetPhase(prev); g.origin = nil }()

	// A tensor takes a gradient if it depends on one of wrt and loss
	// depends on it.
	dependsOnWrt := make([]bool, len(g.Tensors))
	for _, t := range wrt {
		dependsOnWrt[t.ID] = true
	}
	fwd := g.Nodes // the backward nodes appended below are not revisited
	for _, n := range fwd {
		for _, in := range n.Inputs {
			if dependsOnWrt[in.ID] {
				for _, out := range n.Outputs {
					dependsOnWrt[out.ID] = true
				}
				break
			}
		}
	}
	if !dependsOnWrt[loss.ID] {
		return nil, fmt.Errorf("%w: the loss %s depends on none of the %d tensors asked for", ErrNoGradient, loss.Name, len(wrt))
	}

	grads := make(map[int]*Tensor)
	grads[loss.ID] = g.Fill(Shape{}, 1)
	for i := len(fwd) - 1; i >= 0; i-- {
		n := fwd[i]
		dy := make([]*Tensor, len(n.Outputs))
		any := false
		for j, out := range n.Outputs {
			dy[j] = grads[out.ID]
			any = any || dy[j] != nil
		}
		if !any {
			continue
		}
		d, ok := n.Op.(Differentiable)
		if !ok {
			return nil, fmt.Errorf("graph: backward: op %s (node %s) has no gradient rule", n.Op.Type(), n.Name)
		}
		need := make([]bool, len(n.Inputs))
		for j, in := range n.Inputs {
			need[j] = dependsOnWrt[in.ID]
		}
		g.origin = n
		dx := d.Grad(g, n, dy, need)
		if g.err != nil {
			return nil, fmt.Errorf("graph: backward through %s: %w", n.Name, g.err)
		}
		for j, in := range n.Inputs {
			if j >= len(dx) || dx[j] == nil || !dependsOnWrt[in.ID] {
				continue
			}
			if prev, ok := grads[in.ID]; ok {
				grads[in.ID] = g.Add(prev, dx[j])
			} else {
				grads[in.ID] = dx[j]
			}
		}
	}
	if g.err != nil {
		return nil, g.err
	}
	out := make([]*Tensor, len(wrt))
	for i, t := range wrt {
		out[i] = grads[t.ID]
		if out[i] == nil {
			return nil, fmt.Errorf("%w for %s: the loss does not depend on it", ErrNoGradient, t.Name)
		}
	}
	return out, nil
}
