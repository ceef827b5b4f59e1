package plans

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/graph"
)

// A strategy file means what its grammar string means.
func TestStrategyFileMatchesGrammar(t *testing.T) {
	for _, tt := range []struct{ file, grammar string }{
		{"# nothing but a comment\n{}", "single"},
		{"dp: 2", "dp=2"},
		{"dp: 2\npp: 2\nmb: 4\nsched: gpipe", "dp=2,pp=2,mb=4,sched=gpipe"},
		{"dp: 2\nmb: [3, 1]", "dp=2,mb=3:1"},
		{"dp: 2\nmb: 3:1", "dp=2,mb=3:1"},
		{"dp: 3\nmb: auto\nmbs: 8", "dp=3,mb=auto,mbs=8"},
		{"dp: 3\nmb: auto:8", "dp=3,mb=auto:8"},
		{"pp: 2\nlayers: [3, 1]", "pp=2,layers=3:1"},
		{"pp: 2\nlayers: auto", "pp=2,layers=auto"},
		{"dp: 2\ntp: 2\nsp: true\npp: 2\nmb: 2\nrecompute: selective", "dp=2,tp=2,sp=on,pp=2,mb=2,recompute=selective"},
		{"dp: 4\nzero: 3\nprefetch: 1\nslots: 3", "dp=4,zero=3,prefetch=1,slots=3"},
		{"tp: 2\nsp: off", "tp=2,sp=off"},
		{"pp: 4\nvpp: 2\nmb: 4", "pp=4,vpp=2,mb=4"},
		{"dp: 2\npp: 2\nplace: [v100, a100]", "dp=2,pp=2,place=v100:a100"},
		{"pp: 2\nstages:\n  - {layers: 3, place: v100}\n  - {layers: 1, place: a100}", "pp=2,layers=3:1,place=v100:a100"},
		{"devices: [a/gpu1]", "devices=a/gpu1"},
		{"dp: 2\ndevices: [host/cpu0:1, host/cpu0:0]", "dp=2,devices=host/cpu0:1+host/cpu0:0"},
		{"dp: 2\nbucket: 25MiB", "dp=2,bucket=25MiB"},
	} {
		want, err := ParseStrategy(tt.grammar, 64)
		require.NoError(t, err, tt.grammar)
		got, err := ParseStrategyFile("s.yaml", []byte(tt.file), 64)
		require.NoError(t, err, tt.file)
		require.Equal(t, want, got, tt.file)
	}
}

// A stage lists its devices replica by replica; the plan orders them
// replica, stage, tensor-parallel rank. The devices round-trip through
// the strategy's string, which a plan records.
func TestStrategyFileStageDevices(t *testing.T) {
	file := `
dp: 2
tp: 2
pp: 2
mb: 2
stages:
  - devices: [v100-0/gpu0, v100-0/gpu1, v100-1/gpu0, v100-1/gpu1]
  - devices: [a100-0/gpu0, a100-0/gpu1, a100-1/gpu0, a100-1/gpu1]
`
	st, err := ParseStrategyFile("s.yaml", []byte(file), 64)
	require.NoError(t, err)
	want := []string{
		"v100-0/gpu0", "v100-0/gpu1", "a100-0/gpu0", "a100-0/gpu1", // replica 0: stage 0's ranks, stage 1's
		"v100-1/gpu0", "v100-1/gpu1", "a100-1/gpu0", "a100-1/gpu1",
	}
	require.Equal(t, want, st.DeviceNames)
	again, err := ParseStrategy(st.String(), 64)
	require.NoError(t, err)
	require.Equal(t, st, again)

	devs, err := st.PlaceDevices(mixedPool(t))
	require.NoError(t, err)
	var names []string
	for _, d := range devs {
		names = append(names, d.Name)
	}
	require.Equal(t, want, names)
}

// A plan compiled from named devices runs on them, and a strategy file
// on disk is read by LoadStrategy; a string is parsed as before.
func TestNamedDevicesCompile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "two-types.yml")
	require.NoError(t, os.WriteFile(path, []byte(`
dp: 2
pp: 2
mb: [3, 1]
stages:
  - layers: 3
    devices: [a100-1/gpu7, a100-0/gpu3]
  - layers: 1
    devices: [v100-1/gpu0, v100-0/gpu5]
`), 0o644))
	st, err := LoadStrategy(path, 64)
	require.NoError(t, err)
	fromString, err := LoadStrategy(st.String(), 64)
	require.NoError(t, err)
	require.Equal(t, st, fromString)

	p, err := Compile(Config{Model: "mnist-cnn", Batch: 64, Strategy: st, Optimizer: graph.SGD{LR: 0.01},
		Cluster: "mixed-a100-v100", Devices: mixedPool(t)})
	require.NoError(t, err)
	var names []string
	for _, d := range p.Devices {
		names = append(names, d.Name)
	}
	require.Equal(t, []string{"a100-1/gpu7", "v100-1/gpu0", "a100-0/gpu3", "v100-0/gpu5"}, names)
	require.Equal(t, st.String(), p.Strategy)
	require.Equal(t, "A100-SXM4-40GB", p.Devices[0].Type)
	require.Equal(t, "V100-SXM2-16GB", p.Devices[1].Type)
}

func TestNamedDevicesErrors(t *testing.T) {
	pool := mixedPool(t)
	for _, tt := range []struct{ strategy, want string }{
		{"pp=2,devices=a100-0/gpu0+a100-0/gpu9", `replica 0's stage 1 is "a100-0/gpu9", which the cluster does not have (its devices: a100-0/gpu0, a100-0/gpu1,`},
		{"dp=2,tp=2,devices=a100-0/gpu0+a100-0/gpu1+a100-0/gpu2+a100-0/gpu1",
			`"a100-0/gpu1" is named for replica 0's stage 0, tensor-parallel rank 1 and for replica 1's stage 0, tensor-parallel rank 1`},
	} {
		st, err := ParseStrategy(tt.strategy, 64)
		require.NoError(t, err, tt.strategy)
		_, err = st.PlaceDevices(pool)
		require.ErrorIs(t, err, ErrInfeasible, tt.strategy)
		require.ErrorContains(t, err, tt.want, tt.strategy)
	}
	for _, tt := range []struct{ strategy, want string }{
		{"dp=2,devices=a/gpu0", "devices names 1 devices; dp×pp×tp = 2×1×1 needs 2"},
		{"pp=2,place=v100:a100,devices=a/gpu0+b/gpu0", "give place (a device type per stage) or devices (every device by name), not both"},
		{"devices=a/gpu0++b/gpu0", "want device names joined by +"},
	} {
		_, err := ParseStrategy(tt.strategy, 64)
		require.ErrorContains(t, err, tt.want, tt.strategy)
	}
}

// Errors name the file, and the line and key where a value is wrong, or
// of the key an error between keys is about.
func TestStrategyFileErrors(t *testing.T) {
	for _, tt := range []struct{ file, want string }{
		{"dp: [2]", "s.yaml:1: dp: want an integer, got a list"},
		{"dp: two", `s.yaml:1: dp: want an integer, got "two"`},
		{"dp: 2\nmb: [3, 1, 1]", `s.yaml:2: mb: strategy "dp=2,mb=3:1:1": mb gives 3 counts for dp=2 replicas`},
		{"tp: 1\nzero: 2", `s.yaml:2: zero: strategy "tp=1,zero=2": zero=2 splits optimizer state over data-parallel replicas: it needs dp ≥ 2`},
		{"zero: 7", `s.yaml:1: zero: strategy "zero=7": zero=7: want 0, 1, 2 or 3`},
		{"dp: 2\nbucket: lots", `s.yaml:2: bucket: strategy "dp=2,bucket=lots": bucket=lots: want a size`},
		{"bucket: 1MiB", `s.yaml:1: bucket: strategy "bucket=1MiB": bucket=1MiB packs the gradients`},
		{"pp: 2\nsched: gpipe\nvpp: 2", `s.yaml:3: vpp: strategy "pp=2,sched=gpipe,vpp=2": vpp interleaves`},
		{"pp: 3\nstages:\n  - layers: 3\n  - layers: 1", `s.yaml:3: layers: strategy "pp=3,layers=3:1": layers gives 2 counts for pp=3 stages`},
		{"dp: 2\nmbs: 5", `s.yaml:2: mbs: strategy "dp=2,mbs=5": batch 64 does not split`},
		{"dp: 2\nmb: [3, x]", `s.yaml:2: mb[1]: want an integer, got "x"`},
		{"dp: 2\nmb: 3:x", `s.yaml:2: mb: want counts, as [3, 1] or 3:1, got "3:x"`},
		{"dp: 2\nmb: []", "s.yaml:2: mb: want a count or a list of counts, got a list"},
		{"sp: maybe", `s.yaml:1: sp: want true or false, got "maybe"`},
		{"sched: 1f1b,dp=2", `s.yaml:1: sched: want a word without , = or +, got "1f1b,dp=2"`},
		{"place: [v100, 'a:b']", `s.yaml:1: place[1]: want one name, got "a:b"`},
		{"foo: 1", "s.yaml:1: foo: unknown key (known: dp,"},
		{"dp: 2\ndp: 3", "s.yaml:2: dp: given twice (also at line 1)"},
		{"pp: 2\nlayers: [1, 1]\nstages:\n  - layers: 1\n  - layers: 1", "s.yaml:4: layers: given twice (also at line 2)"},
		{"", "s.yaml: empty; want a mapping of strategy keys"},
		{"- dp", "s.yaml:1: strategy: want a mapping of strategy keys"},
		{"dp: 2\n  pp: 2", "s.yaml: yaml: line 2"},
		{"stages: 2", "s.yaml:1: stages: want a list of stages"},
		{"pp: 2\nstages:\n  - layers: 3\n  - devices: [a]", "s.yaml:4: stages[1].devices: given for some stages only"},
		{"pp: 2\nstages:\n  - layers: 3\n  - {}", "s.yaml:3: stages: layers given for 1 of 2 stages"},
		{"pp: 2\nstages:\n  - {layers: 3, layers: 2}\n  - {layers: 1}", "s.yaml:3: stages[0].layers: given twice"},
		{"pp: 2\nstages:\n  - {size: 3}\n  - {layers: 1}", "s.yaml:3: stages[0].size: unknown key"},
		{"dp: 2\npp: 2\nstages:\n  - devices: [a/0, b/0]\n  - devices: [c/0]", "s.yaml:5: stages[1].devices: 1 devices; a stage runs on dp·tp = 2·1"},
		{"x: &a 1\ndp: *a", "s.yaml:1: x: unknown key"},
		{"dp: *a", "s.yaml: yaml: unknown anchor 'a' referenced"},
	} {
		_, err := ParseStrategyFile("s.yaml", []byte(tt.file), 64)
		require.ErrorContains(t, err, tt.want, tt.file)
	}
	_, err := LoadStrategy(filepath.Join(t.TempDir(), "none.yaml"), 64)
	require.ErrorContains(t, err, "none.yaml: no such file")
	require.True(t, IsStrategyFile("a/B.YML"))
	require.False(t, IsStrategyFile("dp=2,pp=2"))
}

// ParseStrategyFile never panics; what it accepts is the strategy its
// recorded string gives.
func FuzzParseStrategyFile(f *testing.F) {
	for _, s := range []string{"dp: 2", "dp: 2\nmb: [3, 1]", "pp: 2\nstages:\n  - {layers: 3, place: v100}\n  - {layers: 1, place: a100}",
		"dp: 2\ntp: 2\npp: 2\nmb: 2\nstages:\n  - devices: [a, b, c, d]\n  - devices: [e, f, g, h]", "dp: [2]", "- 1", "x: &a 1\ndp: *a",
		"dp: 4\nzero: 3\nprefetch: 1", "devices: [a:0]", "stages: [{devices: [a]}]"} {
		f.Add([]byte(s), 64)
	}
	f.Fuzz(func(t *testing.T, data []byte, batch int) {
		st, err := ParseStrategyFile("f.yaml", data, batch)
		if err != nil {
			return
		}
		back, err := ParseStrategy(st.String(), batch)
		if err != nil {
			t.Fatalf("%q gives %+v, whose string %q does not parse: %v", data, st, st.String(), err)
		}
		if !slices.Equal(back.DeviceNames, st.DeviceNames) || !slices.Equal(back.Layers, st.Layers) || !slices.Equal(back.Place, st.Place) ||
			back.Devices() != st.Devices() || back.TotalMicros() != st.TotalMicros() {
			t.Fatalf("%q gives %+v, whose string %q parses as %+v", data, st, st.String(), back)
		}
	})
}
