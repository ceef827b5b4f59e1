package cputime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Spinning for a while shows up as CPU time, and the count only grows.
func TestProcessCounts(t *testing.T) {
	t0, err := Process()
	require.NoError(t, err)
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
	}
	t1, err := Process()
	require.NoError(t, err)
	require.GreaterOrEqual(t, t1-t0, 20*time.Millisecond, "a 50 ms spin")
}
