package graph_test

import (
	"fmt"

	"github.com/flowkit/flowkit/graph"
)

// A linear classifier: build the forward pass, then let Minimize append
// the backward pass and the optimizer's updates.
func Example() {
	g := graph.New()
	x := g.Input("x", graph.Shape{32, 784}, graph.F32)
	labels := g.Input("labels", graph.Shape{32}, graph.I32)
	w := g.Param("w", graph.Shape{10, 784}, graph.Init{Kind: graph.Uniform, Scale: 0.03})
	b := g.Param("b", graph.Shape{10}, graph.Init{})
	loss := g.SoftmaxCrossEntropy(g.Linear(x, w, b), labels)
	if err := g.Minimize(loss, graph.SGD{LR: 0.1, Momentum: 0.9}); err != nil {
		fmt.Println(err)
		return
	}
	for _, n := range g.Nodes {
		fmt.Printf("%-8s %-26s %v\n", n.Phase, n.Name, n.Outputs)
	}
	fmt.Println(g.NumParams(), "parameters;", g.Cost(graph.Forward).FLOPs, "forward")
	// Output:
	// forward  matmul                     [matmul:f32[32,10]]
	// forward  bias_add                   [bias_add:f32[32,10]]
	// forward  softmax_cross_entropy      [softmax_cross_entropy:f32[]]
	// backward fill                       [fill:f32[]]
	// backward softmax_cross_entropy_grad [softmax_cross_entropy_grad:f32[32,10]]
	// backward bias_grad                  [bias_grad:f32[10]]
	// backward matmul_1                   [matmul_1:f32[10,784]]
	// update   momentum_update            []
	// update   momentum_update_1          []
	// 7850 parameters; 504 kFLOP forward
}

// Shape errors name the op and the shapes involved.
func ExampleGraph_Err() {
	g := graph.New()
	a := g.Input("a", graph.Shape{4, 3}, graph.F32)
	b := g.Input("b", graph.Shape{4, 5}, graph.F32)
	g.MatMul(a, b, false, false)
	fmt.Println(g.Err())
	// Output:
	// graph: matmul: inner dimensions differ: 3 vs 4 (transA=false, transB=false) (inputs f32[4,3] f32[4,5])
}
