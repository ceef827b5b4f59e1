package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// A rank whose Run fails tells every other rank at once (MsgFailed), so
// that theirs fail with its error, rather than wait for it until their
// stall timeout while its link stays up. Only a rank's own failure is
// told: not one heard from another rank (a *RankError), nor a failed link
// (every rank sees that by itself), nor the cancelling of Run's context
// by its caller. The message rides the link as every other does, in
// order after what the rank sent before; the inboxes never block their
// senders, and the receiving goroutine, which handles it, waits for no
// firing.

// RankError is another rank's failure, as it told this one: a
// multi-process Run fails on every rank with the error of the rank that
// failed.
type RankError struct {
	Rank int
	Text string // the rank's error
}

func (e *RankError) Error() string { return fmt.Sprintf("runtime: rank %d failed: %s", e.Rank, e.Text) }

// Is says that a rank that stalled is ErrStalled here too: the run made
// no progress, whichever rank noticed first.
func (e *RankError) Is(target error) bool {
	return target == ErrStalled && strings.HasPrefix(e.Text, ErrStalled.Error())
}

// maxFailureText bounds the bytes of an error a MsgFailed carries.
const maxFailureText = 4096

// fail ends the run with err, unless it has already ended (the first
// cause stands), and wakes every goroutine that waits. In a multi-process
// run it tells the other ranks of this rank's own failure.
func (x *run) fail(err error) {
	x.mu.Lock()
	first := context.Cause(x.ctx) == nil
	x.cancel(err)
	x.cond.Broadcast()
	x.mu.Unlock()
	if first && x.rr != nil {
		x.tellFailure(err)
	}
}

// tellFailure sends every other rank MsgFailed with err, unless err is
// another rank's or the link's. A send that fails is the link's failure,
// which the other ranks see by themselves.
func (x *run) tellFailure(err error) {
	rk := x.r.rk
	if _, heard := errors.AsType[*RankError](err); heard || rk.link.Err() != nil {
		return
	}
	text := failureText(err)
	words := failureWords(text)
	for k := range rk.link.Size() {
		if k != rk.me {
			_ = x.send(k, &Message{Kind: MsgFailed, Chunk: len(text), I: words})
		}
	}
}

// failureText is err's text, cut to maxFailureText bytes of UTF-8.
func failureText(err error) string {
	text := err.Error()
	if len(text) > maxFailureText {
		text = strings.ToValidUTF8(text[:maxFailureText-len("…")], "") + "…"
	}
	return text
}

// failureWords packs text into words, four bytes a word, little-endian.
func failureWords(text string) []int32 {
	w := make([]int32, (len(text)+3)/4)
	for i := range len(text) {
		w[i/4] |= int32(uint32(text[i]) << (8 * (i % 4)))
	}
	return w
}

// failure returns the error a MsgFailed from another rank carries.
func failure(m *Message) error {
	if m.Chunk < 0 || m.Chunk > 4*len(m.I) || m.Chunk > maxFailureText || len(m.I) > (m.Chunk+3)/4 {
		return fmt.Errorf("runtime: rank %d said it failed, in %d bytes packed in %d words", m.From, m.Chunk, len(m.I))
	}
	b := make([]byte, m.Chunk)
	for i := range b {
		b[i] = byte(uint32(m.I[i/4]) >> (8 * (i % 4)))
	}
	return &RankError{Rank: m.From, Text: strings.ToValidUTF8(string(b), "\uFFFD")}
}
