package trace

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAlike(t *testing.T) {
	rows := []Row{{"a/0", "1\t2"}, {"a/1", "1\t2"}, {"a/2", "1\t2"}, {"a/3", "1\t3"}, {"b/0", "1\t2"}, {"b/1", "1\t2"}}
	require.Equal(t, []Row{{"a/0 … a/2 (3)", "1\t2"}, {"a/3", "1\t3"}, {"b/0 … b/1 (2)", "1\t2"}}, Alike(rows))
	require.Equal(t, []Row{{"a", "x"}}, Alike([]Row{{"a", "x"}}))
	require.Empty(t, Alike(nil))
	// Rows that differ stay as they are.
	distinct := []Row{{"a", "1"}, {"b", "2"}, {"c", "1"}}
	require.Equal(t, distinct, Alike(distinct))
}
