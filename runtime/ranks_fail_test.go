package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/runtime/internal/plantest"
)

// A rank whose Run fails while its link stays up tells the others: their
// Runs fail at once with an error naming it and its error, not ErrStalled
// after the stall timeout (a minute here, which the hang guard of 30 s
// would see first); whichever rank fails, rank 0 or another, with data and
// collectives in flight, over two ranks or three.
func TestRanksFailure(t *testing.T) {
	why := errors.New("the data set is gone")
	for _, c := range []struct {
		strategy string
		ranks    []int
		failing  int
	}{
		{"dp=2", []int{0, 1}, 1},
		{"dp=2", []int{0, 1}, 0},
		{"pp=2,mb=4,sched=1f1b", []int{0, 1}, 0},
		{"pp=2,mb=4,sched=1f1b", []int{1, 0}, 1}, // rank 1 holds the inputs
		{"dp=2,pp=2,mb=2", []int{0, 1, 2, 0}, 2},
	} {
		t.Run(fmt.Sprintf("%s/%v/rank%d", c.strategy, c.ranks, c.failing), func(t *testing.T) {
			p := compile(t, "mlp", c.strategy, 16)
			h := newMemHub(slices.Max(c.ranks) + 1)
			rs := make([]*PlanRunner, len(h.boxes))
			for k := range rs {
				var err error
				rs[k], err = NewRankRunner(p, c.ranks, memLink{h, k})
				require.NoError(t, err)
				rs[k].Stall = time.Minute
			}
			errs := plantest.RunFailing(t, len(rs), c.failing, NewSyntheticFeeder(p.Images, 10, 64, 9), why,
				func(ctx context.Context, k int, feed plantest.Feeder) error {
					_, err := rs[k].Run(ctx, 5, feed)
					return err
				})
			for k, err := range errs {
				if k != c.failing {
					e, ok := errors.AsType[*RankError](err)
					require.True(t, ok, "rank %d: %v", k, err)
					require.Equal(t, c.failing, e.Rank)
				}
			}
		})
	}
}

// A failure's text crosses in words, whole or cut at a bound; a malformed
// one is an error, never a panic.
func TestFailureMessage(t *testing.T) {
	long := errors.New(strings.Repeat("é", maxFailureText))
	cut := failureText(long)
	require.LessOrEqual(t, len(cut), maxFailureText)
	require.True(t, utf8.ValidString(cut) && strings.HasSuffix(cut, "é…"), "cut at a rune")
	for _, text := range []string{"", "a", "four", "five!", "rank 3: ünïcödé ✓", cut} {
		m := &Message{From: 3, Kind: MsgFailed, Chunk: len(text), I: failureWords(text)}
		e, ok := errors.AsType[*RankError](failure(m))
		require.True(t, ok, "%q", text)
		require.True(t, e.Rank == 3 && e.Text == text, "got rank %d %q, want rank 3 %q", e.Rank, e.Text, text)
	}
	// A rank that stalled stalled the run, as every rank reports it.
	stalled := failureText(fmt.Errorf("%w: no task finished for 1m0s", ErrStalled))
	require.ErrorIs(t, failure(&Message{From: 1, Kind: MsgFailed, Chunk: len(stalled), I: failureWords(stalled)}), ErrStalled)
	require.NotErrorIs(t, failure(&Message{From: 1, Kind: MsgFailed, Chunk: 4, I: failureWords("oops")}), ErrStalled)

	for _, m := range []*Message{
		{Chunk: -1},
		{Chunk: 5, I: []int32{1}},
		{Chunk: 1, I: []int32{1, 2}},
		{Chunk: maxFailureText + 4, I: make([]int32, maxFailureText/4+1)},
	} {
		err := failure(m)
		_, ok := errors.AsType[*RankError](err)
		require.False(t, ok, "chunk %d in %d words", m.Chunk, len(m.I))
		require.ErrorContains(t, err, "said it failed")
	}
}
