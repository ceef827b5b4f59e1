// Package plans compiles a training iteration into a static plan and
// derives the rules both engines execute it by.
//
// Compile takes a zoo model, a strategy (data-parallel replicas, pipeline
// stages, micro-batches, schedule; for unequal devices, micro-batches per
// replica and layers per stage, which plans/search can choose by
// simulation) and devices, and produces a Plan: tasks
// (actors) bound to streams, each firing once per micro-batch or once per
// iteration; registers with slot counts and offsets in their device's
// arena; a per-stream order of one iteration's firings; and the peak
// memory of every device. Plans are self-contained, versioned JSON files
// (Encode, Decode, ReadFile), compact as DESIGN §4.2 asks: a file lists
// tasks, not their firings, and each stream's order as the schedule's
// runs over micro-batches (file.go); Decode unrolls them.
//
// Deps turns the plan into dependency edges — producer → consumer, slot
// reuse, in-place update order, stream order — each with an iteration
// distance of 0 or 1. The simulator and the runtime both execute by these
// edges alone, so a plan is "executed unchanged" by construction. A cycle
// of distance-0 edges is a deadlock, rejected at compile time with the
// firings and rules involved (ErrDeadlock); a device whose planned memory
// exceeds its capacity is rejected too (ErrOutOfMemory).
//
// CheckTrace verifies any execution trace, simulated or measured, against
// the plan: every edge respected, no register holding more live versions
// than it has slots, no two registers that share memory live at once.
//
// What fills a device's memory: Categories puts every register in one of
// five categories (weights, optimizer state, gradients, activations,
// temporaries) from the plan's structure — the optimizer's updates, task
// kinds and phases — and UnsharedByCategory divides a device's planned
// memory by them. LiveMemory replays a trace of the plan: per device the
// bytes live over time (a slot from the start of its write to the end of
// its last read), the peak, and what held it. The arena is never smaller
// than any trace's live peak, since the planner keeps apart what any
// execution the edges allow holds at once.
package plans
