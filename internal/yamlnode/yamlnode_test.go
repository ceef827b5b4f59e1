package yamlnode

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func TestDescribe(t *testing.T) {
	var doc yaml.Node
	require.NoError(t, yaml.Unmarshal([]byte("m: {a: 1}\nl: [1]\ns: two\nx: &x 1\ny: *x\n"), &doc))
	top := doc.Content[0]
	var got []string
	for i := 1; i < len(top.Content); i += 2 {
		got = append(got, Describe(top.Content[i]))
	}
	require.Equal(t, []string{"a mapping", "a list", `"two"`, `"1"`, "an alias"}, got)
	require.Equal(t, "something else", Describe(&doc))
}
