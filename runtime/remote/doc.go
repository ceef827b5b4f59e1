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
// The connections are TLS 1.3, both ends authenticated by one ed25519 key
// that every rank derives from the run's shared token (HKDF-SHA256): a
// peer that completes the handshake knows the token, which never crosses
// the network, and what the ranks exchange is encrypted. Every call also
// carries the token, inside the TLS connection, compared in constant time.
// A rank given another token is told so as it joins ("runs with another
// token"), not after a timeout. The security is the token's: whoever
// connects receives a rank's certificate, from which a guessable token can
// be found offline, so make it long and random (flowrun's --procs makes
// one of 128 bits) and keep it off shared disks.
//
// A rank that dies breaks its streams: every other rank's Link then fails
// (Err names the lost rank, open Inbox channels close) and Next and Gather
// return errors, rather than anyone waiting for a message that will never
// come. Group.Close is the normal end: the coordinator says goodbye, the
// workers' Next returns io.EOF, and no rank reports a failure.
package remote
