package topology

import (
	"embed"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
)

//go:embed presets/*.yaml
var presetFS embed.FS

// ErrUnknownCluster is returned for a name that is neither a preset nor a
// sized preset.
var ErrUnknownCluster = errors.New("topology: unknown cluster")

// PresetNames lists the built-in clusters, sorted.
func PresetNames() []string {
	entries, _ := presetFS.ReadDir("presets")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	slices.Sort(names)
	return names
}

// PresetSource returns the YAML of a built-in cluster.
func PresetSource(name string) ([]byte, error) {
	data, err := presetFS.ReadFile(path.Join("presets", name+".yaml"))
	if err != nil {
		return nil, fmt.Errorf("%w %q (presets: %s)", ErrUnknownCluster, name, strings.Join(PresetNames(), ", "))
	}
	return data, nil
}

// Preset loads a built-in cluster. NAMExK sizes preset NAME to K times its
// nodes (dgx-a100x4 is four DGX A100s): every node count is multiplied by K
// and the preset's fabric joins them, a fat tree once one switch has too
// few ports. An exact preset name wins over sizing, so dlperf-v100x32 is
// the preset and dlperf-v100x32x2 twice it.
func Preset(name string) (*Cluster, error) {
	if data, err := PresetSource(name); err == nil {
		return parse("presets/"+name+".yaml", data, 1)
	}
	if i := strings.LastIndexByte(name, 'x'); i > 0 {
		base, k := name[:i], name[i+1:]
		if data, err := PresetSource(base); err == nil {
			n, err := strconv.Atoi(k)
			if err != nil || n < 1 || n > maxNodes || k[0] == '0' {
				return nil, fmt.Errorf("%w %q: %s is a preset, but %q is no size: NAMExK takes K from 1 to %d", ErrUnknownCluster, name, base, k, maxNodes)
			}
			c, err := parse("presets/"+base+".yaml", data, n)
			if err != nil {
				// The file is fine at its own size: say what the size does.
				if one, err1 := parse("presets/"+base+".yaml", data, 1); err1 == nil {
					return nil, fmt.Errorf("topology: cluster %s is %d times the nodes of %s, at about %d devices and switches a node, and a cluster holds at most %d: %w",
						name, n, base, (len(one.Devices)+len(one.Switches)+len(one.Nodes)-1)/len(one.Nodes), maxVertices, err)
				}
				return nil, err
			}
			c.Name = name
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w %q (presets: %s, each sizable as NAMExK; or a YAML file)", ErrUnknownCluster, name, strings.Join(PresetNames(), ", "))
}

// Resolve loads a cluster named on a command line: a path to a YAML file
// (anything ending in .yaml or .yml, or containing a slash) or a preset.
func Resolve(arg string) (*Cluster, error) {
	if strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml") || strings.ContainsRune(arg, os.PathSeparator) {
		return Load(arg)
	}
	c, err := Preset(arg)
	if errors.Is(err, ErrUnknownCluster) {
		if fi, serr := os.Stat(arg); serr == nil && fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%w; a file %s exists, but only names ending in .yaml or .yml, or with a slash (./%s), are read as cluster files", err, arg, arg)
		}
	}
	return c, err
}
