package plans

import "errors"

var (
	// ErrDeadlock: the plan's dependency edges contain a cycle.
	ErrDeadlock = errors.New("plans: plan can deadlock")
	// ErrOutOfMemory: a device's planned memory exceeds its capacity.
	ErrOutOfMemory = errors.New("plans: out of memory")
	// ErrInfeasible: the strategy does not fit the model, batch or cluster.
	ErrInfeasible = errors.New("plans: infeasible strategy")
)
