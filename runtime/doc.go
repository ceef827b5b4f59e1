// Package runtime executes flowkit graphs on real devices with real kernels.
//
// A Store holds the persistent tensors (parameters and optimizer state) by
// name, initialized deterministically from a seed, so that several graphs —
// a training iteration and an evaluation pass — share one set of weights.
// An Executor binds one graph to a device and a Store: it allocates every
// other tensor once and runs the graph's nodes in order, each iteration
// reusing the same buffers. Train drives an Executor over a data set.
//
// The CPU device runs the kernels of kernels/cpu on a pool of workers.
package runtime
