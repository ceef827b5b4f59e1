package cliargs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestArgs(t *testing.T) {
	one := One("a plan file")
	require.NoError(t, one(nil, []string{"p.json"}))
	require.EqualError(t, one(nil, nil), "give a plan file")
	require.EqualError(t, one(nil, []string{"a", "b"}), `want one argument, a plan file; got 2: ["a" "b"]`)
	some := AtLeastOne("the shards' JSON files")
	require.NoError(t, some(nil, []string{"a", "b"}))
	require.EqualError(t, some(nil, nil), "give the shards' JSON files")
}
