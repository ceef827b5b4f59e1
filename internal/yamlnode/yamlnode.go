// Package yamlnode holds what the YAML readers of flowkit's files
// (clusters, strategies) say alike about a node.
package yamlnode

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Describe says what a node is, for an error that wanted something else:
// "a mapping", "a list", "an alias", or a scalar's value, quoted.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}
