// Package remote connects the ranks (processes) of one multi-process
// flowkit run over gRPC: they find one another, exchange runtime.Messages
// through a runtime.Link, and the coordinator drives the workers.
//
// Processes follow the launcher conventions of torchrun and Slurm (see
// FromEnv): each knows its RANK, the WORLD_SIZE, and where rank 0 listens
// (MASTER_ADDR:MASTER_PORT). Rank 0 is the coordinator (Coordinate); every
// other rank is a worker (Join), which serves its own peer address, joins
// the coordinator and learns from it where every other rank is. Then each
// rank opens one Deliver stream to every other rank: the mesh over which
// Link.Send carries messages, each stream in order. Group.Broadcast,
// Next, Reply and Gather carry the coordinator's commands and the workers'
// answers over the control stream of the join.
//
// Every call carries the run's shared token, compared in constant time; the
// connections themselves are not encrypted, so a run's network must be
// trusted.
//
// A rank that dies breaks its streams: every other rank's Link then fails
// (Err names the lost rank, open Inbox channels close) and Next and Gather
// return errors, rather than anyone waiting for a message that will never
// come. Group.Close is the normal end: the coordinator says goodbye, the
// workers' Next returns io.EOF, and no rank reports a failure.
package remote
