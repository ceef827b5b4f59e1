package plans

import (
	"errors"
	"fmt"
)

var (
	// ErrDeadlock: the plan's dependency edges contain a cycle.
	ErrDeadlock = errors.New("plans: plan can deadlock")
	// ErrOutOfMemory: a device's planned memory exceeds its capacity.
	ErrOutOfMemory = errors.New("plans: out of memory")
	// ErrInfeasible: the strategy does not fit the model, batch or cluster.
	ErrInfeasible = errors.New("plans: infeasible strategy")
	// ErrFewerCores, with ErrInfeasible: a CPU cluster has fewer cores
	// than the plan has devices, which DevicesFromCluster's oversubscribe
	// allows.
	ErrFewerCores = errors.New("fewer CPU cores than devices")
	// ErrUnlikeReplicas, with ErrInfeasible: Config.SharedDP or SharedTP
	// asks for a device to stand for replicas or ranks that do not run
	// alike (uneven micro-batches, devices of other types or memory);
	// compiling them all works (CompileSharing).
	ErrUnlikeReplicas = errors.New("replicas differ")
)

// FiringsError is the ErrInfeasible of a plan too large to plan memory
// for: Firings per iteration where at most Max are planned.
type FiringsError struct{ Firings, Max int }

func (e *FiringsError) Error() string {
	return fmt.Sprintf("%v: %d firings per iteration, at most %d are planned: "+
		"memory is planned firing by firing; fewer micro-batches, layers or devices fit", ErrInfeasible, e.Firings, e.Max)
}

func (e *FiringsError) Unwrap() error { return ErrInfeasible }
