// Package graph is flowkit's logical graph IR: tensors with static shapes and
// dtypes, ops with shape inference, cost (FLOPs and bytes moved), SBP
// signatures and gradient rules, reverse-mode autodiff that appends the
// backward graph, and optimizer updates as graph ops — a training iteration
// as one graph, as in OneFlow's compiled Job.
//
// A Graph is built by calling its methods (g.Conv2D(x, w, ...), g.ReLU(x),
// ...). Building errors are sticky: the first one (naming the op and the
// shapes involved) is kept, later calls return nil tensors, and Err reports
// it, so a model builder checks once at the end.
//
// Nodes are kept in the order they were added, which is a topological order.
// Ops are plain structs whose exported fields are their attributes; the
// runtime dispatches on the concrete type.
package graph
