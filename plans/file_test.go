package plans

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/flowkit/flowkit/topology"
	"github.com/stretchr/testify/require"
)

// fileCases are plans over the model zoo and the strategies of the other
// tables (sim's TestStrategyCombinations, runtime's strategy tests), on
// GPUs (transfers and collectives on streams of their own) and on CPUs
// (on the compute stream), and listing one rank or replica for all.
func fileCases() []struct {
	model, strategy string
	batch           int
	gpus            bool
	sharedTP        bool
	sharedDP        bool
} {
	type fc = struct {
		model, strategy string
		batch           int
		gpus            bool
		sharedTP        bool
		sharedDP        bool
	}
	const (
		gpt    = "gpt:layers=4,hidden=32,heads=4,seq=8,vocab=64"
		blocks = "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16"
		llama  = "llama:layers=2,hidden=32,heads=8,kv_heads=4,ffn=48,seq=8,vocab=64"
	)
	var cs []fc
	for _, dp := range []string{"", "dp=2,"} {
		for _, tp := range []string{"", "tp=2,", "tp=2,sp=on,"} {
			for _, pp := range []string{"", "pp=2,", "pp=2,vpp=2,", "pp=4,"} {
				for _, zero := range []string{"", "zero=1,", "zero=2,", "zero=3,", "zero=3,prefetch=1,"} {
					for _, mb := range []string{"mb=2", "mb=4,sched=gpipe,recompute=selective", "mb=8,recompute=full"} {
						cs = append(cs, fc{gpt, dp + tp + pp + zero + mb, 16, true, false, false})
					}
				}
			}
		}
	}
	for _, s := range []string{"single", "dp=2", "pp=2,mb=4,sched=1f1b", "pp=2,mb=4,sched=gpipe", "mb=2", "dp=2,pp=2,mb=2",
		"dp=2,mb=3:1", "dp=2,pp=2,mb=1:3,sched=gpipe", "pp=2,layers=3:1,mb=2", "pp=3,layers=1:2:1,mb=4",
		"recompute=full", "pp=2,mb=4,sched=gpipe,recompute=full", "dp=2,mb=3:1,recompute=full",
		"pp=2,vpp=2,mb=2", "pp=2,vpp=2,mb=4", "dp=2,pp=2,vpp=2,mb=2", "pp=2,vpp=2,mb=4,recompute=full",
		"dp=2,zero=1", "dp=4,mb=2,zero=1", "dp=2,mb=3:1,zero=1", "dp=2,pp=2,mb=2,zero=1", "dp=4,mb=2,zero=2", "dp=2,pp=2,mb=2,zero=2"} {
		cs = append(cs, fc{"mnist-cnn", s, 16, false, false, false})
	}
	for model, ss := range map[string][]string{
		"mlp":  {"dp=2,tp=2,pp=2,mb=4,sched=gpipe,zero=3,prefetch=1", "dp=2,tp=2,mb=3:1,zero=1", "dp=2,mb=2,zero=3,prefetch=1"},
		blocks: {"dp=2,tp=2,mb=2,recompute=full,zero=3,prefetch=1", "dp=2,tp=2,pp=2,mb=4,zero=3,prefetch=1"},
		llama:  {"dp=2,tp=2,sp=on,mb=2,recompute=full,zero=3,prefetch=1", "dp=2,tp=2,pp=2,mb=2,zero=3"},
	} {
		for _, s := range ss {
			cs = append(cs, fc{model, s, 8, true, false, false}, fc{model, s, 8, false, false, false})
		}
	}
	for _, s := range []string{"dp=2,tp=2,pp=2,mb=8", "dp=2,tp=2,sp=on,pp=2,vpp=2,mb=4,zero=3,prefetch=1", "dp=4,tp=2,pp=4,mb=16,recompute=full"} {
		cs = append(cs, fc{gpt, s, 64, true, true, true})
	}
	return cs
}

// Every plan reads back from its file exactly as compiled, and the file
// lists far less than the firings and orders unrolled (the form of
// version 2, measured on the same plan).
func TestFileRoundTrip(t *testing.T) {
	c, err := topology.Resolve("dgx-a100x4")
	require.NoError(t, err)
	n := 0
	var unrolled, compact int
	for _, tc := range fileCases() {
		name := fmt.Sprintf("%s/%s", tc.model, tc.strategy)
		st, err := ParseStrategy(tc.strategy, tc.batch)
		if err != nil || testing.Short() && st.MB > 4 {
			continue // e.g. zero without dp, or vpp with gpipe
		}
		cfg := Config{Model: tc.model, Batch: tc.batch, Strategy: st, Optimizer: adam, Devices: devs(st.Devices(), 0), SharedTP: tc.sharedTP, SharedDP: tc.sharedDP}
		if tc.gpus {
			name += "/gpus"
			cfg.Cluster = c.Name
			cfg.Devices, err = DevicesFromCluster(c, st.Devices(), false)
			require.NoError(t, err, name)
		}
		if tc.sharedTP || tc.sharedDP {
			name += "/shared"
		}
		t.Run(name, func(t *testing.T) {
			p, err := Compile(cfg)
			require.NoError(t, err)
			var b bytes.Buffer
			require.NoError(t, Encode(&b, p))
			q, err := Decode(bytes.NewReader(b.Bytes()))
			require.NoError(t, err)
			requireSamePlan(t, p, q)

			f, err := p.toFile()
			require.NoError(t, err)
			old, neu := orderBytes(t, p.Streams, p.Firings), orderBytes(t, f.Streams, f.Firings)
			require.Less(t, neu, old, "the streams and firings take %d bytes, unrolled %d", neu, old)
			unrolled += old
			compact += neu
			n++
		})
	}
	t.Logf("%d plans: streams and firings in %d bytes, %d unrolled (%.1f×)", n, compact, unrolled, float64(unrolled)/float64(compact))
	if !testing.Short() {
		require.Greater(t, n, 200)
	}
	require.Greater(t, unrolled, 3*compact)
}

// requireSamePlan fails where p and q differ, naming the first field
// that does (a diff of the whole plans would take minutes).
func requireSamePlan(t *testing.T, p, q *Plan) {
	t.Helper()
	if reflect.DeepEqual(p, q) {
		return
	}
	pv, qv := reflect.ValueOf(p).Elem(), reflect.ValueOf(q).Elem()
	for i := range pv.NumField() {
		name := pv.Type().Field(i).Name
		a, b := pv.Field(i), qv.Field(i)
		if !a.CanInterface() { // deps
			if !reflect.DeepEqual(p.deps, q.deps) {
				t.Fatalf("deps differ")
			}
			continue
		}
		if reflect.DeepEqual(a.Interface(), b.Interface()) {
			continue
		}
		if a.Kind() == reflect.Slice && a.Len() == b.Len() {
			for j := range a.Len() {
				if x, y := a.Index(j).Interface(), b.Index(j).Interface(); !reflect.DeepEqual(x, y) {
					t.Fatalf("%s[%d]: compiled %#v, read %#v", name, j, x, y)
				}
			}
		}
		t.Fatalf("%s: compiled %#v, read %#v", name, a.Interface(), b.Interface())
	}
}

// orderBytes is the size of streams and firings as Encode writes them.
func orderBytes(t *testing.T, streams, firings any) int {
	t.Helper()
	b, err := json.MarshalIndent(struct {
		Streams any `json:"streams"`
		Firings any `json:"firings"`
	}{streams, firings}, "", " ")
	require.NoError(t, err)
	return len(b)
}

// A 1F1B stage's order is three runs, whatever the micro-batches: the
// warm-up forwards, the steady state's backward and forward, the
// cool-down backwards (the first forward of the steady state joins the
// warm-up); then the per-iteration tasks.
func TestFileRunsFollowTheSchedule(t *testing.T) {
	for _, mb := range []int{16, 64} {
		p := mustCompile(t, "mlp", fmt.Sprintf("pp=3,mb=%d", mb), mb)
		f, err := p.toFile()
		require.NoError(t, err)
		got := func(s int) string {
			var rs []string
			for _, r := range f.Streams[s].Order {
				var bs []string
				for _, b := range r.Blocks {
					bs = append(bs, fmt.Sprint(b.Micro))
				}
				rs = append(rs, fmt.Sprintf("%s×%d", strings.Join(bs, ","), r.Repeat))
			}
			return strings.Join(rs, " ")
		}
		// Stage 0 warms up with two forwards, the last stage with none:
		// a micro-batch's forward and backward are one block there.
		require.Equal(t, fmt.Sprintf("0×3 0,3×%d %d×3 -1×1", mb-3, mb-3), got(0), "stage 0, mb=%d", mb)
		require.Equal(t, fmt.Sprintf("0×%d -1×1", mb), got(2), "stage 2, mb=%d", mb)
	}
}

// A plan file whose compact entries are wrong is rejected, saying which
// entry and what is wrong with it.
func TestDecodeRejectsBadFileEntries(t *testing.T) {
	pipe := mustCompile(t, "mlp", "pp=2,mb=4", 8)
	prefetch := compileOnGPUs(t, "mlp", "dp=2,mb=2,zero=3,prefetch=1", 8)
	fileOf := func(p *Plan) *file { return fileOf(t, p) }
	require.NotEmpty(t, fileOf(prefetch).Firings, "a prefetch plan has firings with an After")
	perIteration := func(f *file) *run { // the stream's last run: its updates
		return &f.Streams[0].Order[len(f.Streams[0].Order)-1]
	}
	tests := []struct {
		name string
		p    *Plan
		edit func(f *file)
		want string
	}{
		{"repeat", pipe, func(f *file) { f.Streams[0].Order[0].Repeat = 0 }, "streams[0].order[0]: repeat 0 with 1 blocks"},
		{"no blocks", pipe, func(f *file) { f.Streams[1].Order[1].Blocks = nil }, "streams[1].order[1]: repeat 1 with 0 blocks"},
		{"no tasks", pipe, func(f *file) { f.Streams[0].Order[0].Blocks[0].Tasks = []int{} }, "streams[0].order[0].blocks[0]: no tasks"},
		{"task", pipe, func(f *file) { f.Streams[0].Order[0].Blocks[0].Tasks[0] = 9999 }, "streams[0].order[0].blocks[0]: task 9999 out of range"},
		{"negative task", pipe, func(f *file) { f.Streams[0].Order[0].Blocks[0].Tasks[0] = -1 }, "task -1 out of range"},
		{"micro", pipe, func(f *file) { f.Streams[0].Order[0].Blocks[0].Micro = 3 }, "fires for micro-batches 0 to 3: got 2 times from micro-batch 3"},
		{"repeated too often", pipe, func(f *file) { f.Streams[0].Order[0].Repeat = 5 }, "got 5 times from micro-batch 0"},
		{"per-micro at -1", pipe, func(f *file) { f.Streams[0].Order[0].Blocks[0].Micro = -1 }, "got 2 times from micro-batch -1"},
		{"per-iteration repeated", pipe, func(f *file) { perIteration(f).Repeat = 2 }, "fires once per iteration: want micro −1, not repeated; got micro -1, 2 times"},
		{"per-iteration micro", pipe, func(f *file) { perIteration(f).Blocks[0].Micro = 0 }, "got micro 0, 1 times"},
		{"too many", pipe, func(f *file) {
			f.Streams[0].Order = append(f.Streams[0].Order, f.Streams[0].Order...)
		}, "streams[1].order[0]: the streams list more firings than the tasks make on their streams"},
		{"stream firing twice", pipe, func(f *file) { f.Streams[0].Order[0].Blocks[0].Micro = 1 }, "streams[0]: cpu0/compute lists cpu0/input/images (mb 2) twice"},
		{"stream of another device", pipe, func(f *file) { f.Streams[0].Order, f.Streams[1].Order = f.Streams[1].Order, f.Streams[0].Order }, "streams[0]: cpu0/compute lists"},
		{"stream short", pipe, func(f *file) { f.Streams[0].Order = f.Streams[0].Order[1:] }, "streams[0]: cpu0/compute lists 26 firings, its tasks fire 34 times on it"},
		{"firing task", prefetch, func(f *file) { f.Firings[0].Task = 9999 }, "firings[0]: task 9999 out of range"},
		{"firing micro", prefetch, func(f *file) { f.Firings[0].Micro = 7 }, "firings[0]: task"},
		{"firing twice", prefetch, func(f *file) { f.Firings = append(f.Firings, f.Firings[0]) }, fmt.Sprintf("firings[%d]: task %d micro-batch %d is listed twice", len(fileOf(prefetch).Firings), fileOf(prefetch).Firings[0].Task, fileOf(prefetch).Firings[0].Micro)},
		{"no after", prefetch, func(f *file) { f.Firings[0].After = nil }, "firings[0]: no after"},
		{"after", prefetch, func(f *file) { f.Firings[0].After[0].Micro = 100000 }, "firings[0].after[0]: task"},
		{"after itself", prefetch, func(f *file) { f.Firings[0].After[0] = firingRef{f.Firings[0].Task, f.Firings[0].Micro} }, "want another firing"},
		{"too many firings", pipe, func(f *file) {
			f.MB, f.Batch, f.Images.Shape[0] = maxCount, maxCount*f.MicroBatch, maxCount*f.MicroBatch
			f.Labels.Shape[0] = maxCount * f.MicroBatch
		}, "more than the 10000000 a plan may have"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { requireFileRejects(t, tt.p, tt.edit, tt.want) })
	}
}

// fileOf is the file Encode writes for p, as read back by encoding/json.
func fileOf(t *testing.T, p *Plan) *file {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, Encode(&b, p))
	f := file{header: new(header)}
	require.NoError(t, json.Unmarshal(b.Bytes(), &f))
	return &f
}

// requireFileRejects edits the file of good and checks that reading it
// fails with want: for edits the plan in memory cannot hold, or that its
// file could not write (see requireDecodeRejects).
func requireFileRejects(t *testing.T, good *Plan, edit func(f *file), want string) {
	t.Helper()
	f := fileOf(t, good)
	edit(f)
	b, err := json.Marshal(f)
	require.NoError(t, err)
	_, err = Decode(bytes.NewReader(b))
	require.ErrorContains(t, err, want)
}

// A plan file of version 2, which listed every firing, is refused by its
// version, not by the first field it spells differently.
func TestDecodeRefusesVersion2(t *testing.T) {
	p := mustCompile(t, "mlp", "pp=2,mb=2", 4)
	b, err := json.Marshal(struct {
		*header
		Version int      `json:"version"`
		Streams []Stream `json:"streams"`
		Firings []Firing `json:"firings"`
	}{(*header)(p), 2, p.Streams, p.Firings})
	require.NoError(t, err)
	_, err = Decode(bytes.NewReader(b))
	require.ErrorContains(t, err, "plans: version 2, this build reads version 3: compile the plan again")
}

// Encode refuses a plan whose firings a file cannot imply.
func TestEncodeRefusesOtherFirings(t *testing.T) {
	p := mustCompile(t, "mlp", "dp=2,mb=3", 12)
	p.Firings[0], p.Firings[1] = p.Firings[1], p.Firings[0]
	require.ErrorContains(t, Encode(&bytes.Buffer{}, p), "firings[0] is task 0 micro-batch 1, where a plan file implies task 0 micro-batch 0")
	p.Firings = p.Firings[1:]
	require.ErrorContains(t, Encode(&bytes.Buffer{}, p), "the plan lists")
}

// A plan file that does not parse is located by line and column, and
// what is wrong is said in JSON's words, not Go's.
func TestDecodeLocatesJSONErrors(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, Encode(&b, mustCompile(t, "mlp", "pp=2,mb=2", 4)))
	good := b.String()
	line := func(key string) int { // the line of key's first occurrence
		return 1 + strings.Count(good[:strings.Index(good, `"`+key+`"`)], "\n")
	}
	batch := regexp.MustCompile(`"batch": *`).FindStringIndex(good) // the value starts at batch[1]
	require.NotNil(t, batch)
	column := batch[1] - strings.LastIndex(good[:batch[1]], "\n") // 1-based
	for _, tt := range []struct{ edit, want string }{
		{good[:batch[1]] + `"four"` + good[batch[1]+1:], fmt.Sprintf(`plans: line %d, column %d: batch: a JSON string where an integer is wanted`, line("batch"), column)},
		{strings.Replace(good, `"seed"`, `"sead"`, 1), fmt.Sprintf(`plans: line %d, column `, line("seed"))},
		{strings.Replace(good, `"seed"`, `"sead"`, 1), `unknown field "sead"`},
		{good[:len(good)/2], "the document ends before its value does (truncated JSON)"},
		// A calibration has a version too: it is no plan, not an old one.
		{`{"version": 1, "devices": {"cpu/2": {}}}`, `plans: not a plan file, which lists its tasks: line 1, column 27: devices: a JSON object where an array is wanted`},
	} {
		_, err := Decode(strings.NewReader(tt.edit))
		require.ErrorContains(t, err, tt.want)
	}
}
