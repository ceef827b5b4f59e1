package runtime

// A multi-process run splits a plan's devices over several processes
// (ranks); each runs the streams of its own devices with a PlanRunner (see
// NewRankRunner), and they tell one another, through a Link, what the
// others need to know: that a firing finished, a transfer's data, a
// replica's part of a collective and the reduced chunks of an all-reduce.

// MessageKind is what a Message says.
type MessageKind uint8

const (
	// MsgDone says that the sender finished its part of firing Firing of
	// iteration Iter.
	MsgDone MessageKind = iota + 1
	// MsgData carries the value a cross-rank transfer writes into its
	// destination register (Reg) on the receiver.
	MsgData
	// MsgPart carries a collective's input for the rank that reduces or
	// gathers it: chunk Chunk of the sender's register Reg (one of the
	// collective's writes, naming its member) for an all-reduce, part
	// Chunk of that member's read for a reduce-scatter, and the member's
	// whole read (Chunk its member index) for an all-gather.
	MsgPart
	// MsgReduced carries chunk Chunk of an all-reduce's result, which the
	// sender reduced from every member's MsgPart, for the other ranks
	// taking part.
	MsgReduced
	// MsgPause, from rank 0 whose Stop closed, asks a rank to begin no
	// iteration it has not begun and to answer with MsgBegun.
	MsgPause
	// MsgBegun tells rank 0 the iterations (Iter) the sender has begun:
	// those it had begun when it paused, or all of the run's once its
	// streams have finished them (sent then unasked, since a rank that
	// has ended its Run answers no MsgPause).
	MsgBegun
	// MsgStopAt, from rank 0, ends the run after Iter iterations on every
	// rank, the most any rank had begun; the rank resumes up to there.
	MsgStopAt
	// MsgFailed tells every other rank that the sender's Run failed, and
	// why: its error's text, Chunk bytes packed four to a word in I
	// (failureWords). The others' Runs fail at once with a *RankError,
	// rather than wait for the sender until their stall timeout.
	MsgFailed
	// MsgStopRequest, from a rank other than 0 whose Stop closed, asks
	// rank 0 to stop the run as its own Stop does (PlanRunner.StopAsked).
	MsgStopRequest
)

// Message is one notice between the ranks of a multi-process run, about
// one firing of one iteration of one Run, or about the Run as a whole:
// where it stops (MsgPause, MsgBegun, MsgStopAt, MsgStopRequest) or that
// it failed (MsgFailed); Firing is then unused.
type Message struct {
	Run    int // the Run call, counted from 0 by each runner
	From   int // the sender's rank
	Kind   MessageKind
	Firing int
	Iter   int
	Reg    int       // MsgData, MsgPart
	Chunk  int       // MsgPart, MsgReduced; MsgFailed: the bytes of its text
	F      []float32 // MsgData, MsgPart, MsgReduced: the payload (I for int32 registers; MsgFailed: its text)
	I      []int32
}

// Link connects the ranks of a multi-process run. Ranks are 0 … Size−1.
type Link interface {
	// Rank is this process's rank, Size the number of ranks.
	Rank() int
	Size() int
	// Send delivers m to rank to, after every message sent to it before.
	// It copies the payload before it returns (the caller may then reuse
	// it) and may return before m is delivered. It is safe for concurrent
	// use.
	Send(to int, m *Message) error
	// Inbox returns the messages of run run from every other rank, each
	// sender's in the order sent, including those that arrived before the
	// call. The channel is closed when the link fails (Err says why).
	Inbox(run int) <-chan *Message
	// Forget drops run's messages, those queued and those still to come.
	Forget(run int)
	// Err is why the link failed, nil while it works.
	Err() error
}
