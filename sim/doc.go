// Package sim is flowkit's discrete-event simulator: it executes a plan by
// the plan's dependency edges (the rules of DESIGN §4.3, derived in
// package plans), with task durations from the cost model, and records the
// same trace the runtime records.
//
// The clock is integer nanoseconds (trace.Time). Events are ordered by
// (time, sequence number), the sequence number being the order in which
// events were scheduled, so equal inputs give equal outputs byte for byte.
//
// A firing starts when the last firing it waits for ends, except where the
// runtime must wake a goroutine: if that firing is of another stream and
// its own stream goes on at once, a cost model that implements Dispatch
// delays the start by the device's dispatch latency, or until the waking
// stream has nothing to run, if that is sooner. The delays are events of
// the same queue, so the simulation stays deterministic, and a firing
// still never starts before an edge allows (DESIGN §4.3).
package sim
