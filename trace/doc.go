// Package trace is the event schema that the simulator and the runtime both
// record, so that a prediction and a measurement of the same plan can be set
// side by side.
//
// # Clock
//
// Time is an instant in integer nanoseconds since the start of a run, and
// durations are time.Duration; no time is ever a float. The simulator's
// clock and the runtime's (host or device timers, rebased to the run's
// start) both land on this one clock.
//
// # Events
//
// A Trace lists the plan's tasks (TaskInfo: name, kind, op, phase, the
// streams the task occupies, its work) and the events that happened: an
// Event is one firing of a task, for one iteration and micro-batch, from
// Start to End. A task occupies all of its streams for the whole event: one
// stream for a kernel, both ends for a transfer, every member for a
// collective. Validate checks the invariants both engines promise, above all
// that a stream runs one task at a time. Every analysis below validates the
// trace it is given; Check validates one once, for a caller that runs
// several, and its Checked runs them without validating it again.
//
// # Views
//
// WriteChrome (Perfetto), WriteCSV and WritePprof
// (go tool pprof -diff_base) render a trace; Compare measures the error of a
// predicted trace against a measured one, per iteration and per task.
//
// # Where a step goes
//
// Breakdown divides each device's steady-state step into compute, exposed
// communication (no compute running on the device) and idle time, which add
// up to the step; a device's streams run concurrently, so each part is the
// length of a union of intervals. CriticalPath walks back from the event
// that ended an iteration through the dependency edges of the plan (Dep,
// from plans.Plan.TraceDeps), always to the predecessor that ended last,
// and says what the iteration's span went to: compute, communication and
// waiting, by stream, op and task. Both work alike on a simulated and a
// measured trace, so their differences show where the simulator and the
// machine disagree.
//
// # Determinism
//
// Every function here is a pure function of its input: the same trace gives
// the same bytes from each writer and the same Comparison, whatever the
// order of map iteration. Ties are broken by name, then by index.
package trace
