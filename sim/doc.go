// Package sim is flowkit's discrete-event simulator: it executes a plan by
// the plan's dependency edges (the rules of DESIGN §4.3, derived in
// package plans), with task durations from the cost model, and records the
// same trace the runtime records.
//
// The clock is integer nanoseconds (trace.Time). Events are ordered by
// (time, sequence number), the sequence number being the order in which
// events were scheduled, so equal inputs give equal outputs byte for byte.
package sim
