package plans

import (
	"bytes"
	"slices"
	"strconv"
	"testing"

	"github.com/flowkit/flowkit/topology"
	"github.com/stretchr/testify/require"
)

// compileOnGPUs compiles model under strategy with Adam on the first GPUs
// of a DGX A100, where communication has streams of its own.
func compileOnGPUs(t *testing.T, model, strategy string, batch int) *Plan {
	t.Helper()
	st, err := ParseStrategy(strategy, batch)
	require.NoError(t, err)
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	d, err := DevicesFromCluster(c, st.Devices(), false)
	require.NoError(t, err)
	p, err := Compile(Config{Model: model, Batch: batch, Strategy: st, Optimizer: adam, Cluster: c.Name, Devices: d})
	require.NoError(t, err, strategy)
	return p
}

// isGathered reports whether register r is a ZeRO stage 3 temporary: a
// weight gathered for one phase of a micro-batch.
func isGathered(p *Plan, r int) bool {
	ws := p.Registers[r].Writers
	return len(ws) == 1 && p.Tasks[ws[0]].Kind == AllGather && p.Tasks[ws[0]].PerMicro && !p.Tasks[ws[0]].Sum
}

// Under zero=3 with prefetch, the plans of every schedule compile (the
// compiler rejects any that could deadlock) and read back; each gather
// runs on its devices' gather streams, never on a compute stream; and a
// gather waits (After) only for a task of its own device and micro-batch
// that reads a gathered weight, the release of an earlier layer. Without
// prefetch the gathers stay on the compute stream and nothing is After.
func TestZeroPrefetchPlans(t *testing.T) {
	const (
		blocks = "gpt2s-blocks:layers=4,hidden=64,heads=4,seq=16"
		gpt    = "gpt:layers=4,hidden=32,heads=4,seq=8,vocab=64"
		llama  = "llama:layers=4,hidden=32,heads=8,kv_heads=4,ffn=48,seq=8,vocab=64"
	)
	for _, c := range []struct{ model, strategy string }{
		{"mlp", "dp=2,zero=3,prefetch=1"},
		{"mlp", "dp=4,mb=2,zero=3,prefetch=2"},
		{blocks, "dp=2,mb=2,zero=3,prefetch=1"},
		{blocks, "dp=2,mb=4,sched=gpipe,zero=3,prefetch=1"},
		{blocks, "dp=2,pp=2,mb=4,zero=3,prefetch=1"},
		{blocks, "dp=2,pp=2,mb=4,sched=gpipe,zero=3,prefetch=2"},
		{blocks, "dp=2,pp=2,vpp=2,mb=2,zero=3,prefetch=1"},
		{blocks, "dp=2,mb=2,recompute=full,zero=3,prefetch=1"},
		{blocks, "dp=2,tp=2,mb=2,zero=3,prefetch=1"},
		{gpt, "dp=2,tp=2,sp=on,pp=2,mb=2,recompute=selective,zero=3,prefetch=1"},
		{gpt, "dp=2,pp=2,vpp=2,mb=4,zero=3,prefetch=3"},
		{llama, "dp=2,tp=2,sp=on,mb=2,recompute=full,zero=3,prefetch=1"},
	} {
		t.Run(c.model+"/"+c.strategy, func(t *testing.T) {
			p := compileOnGPUs(t, c.model, c.strategy, 8)
			gathers, bounded := 0, 0
			for f, fi := range p.Firings {
				task := &p.Tasks[fi.Task]
				if task.Kind != AllGather || !isGathered(p, task.Writes[0]) {
					require.Empty(t, fi.After, p.FiringName(f))
					continue
				}
				gathers++
				for _, s := range task.Streams {
					require.Equal(t, "gather", p.Streams[s].Name, "%s: on the gather stream", task.Name)
				}
				for _, a := range fi.After {
					bounded++
					release := p.Firings[a]
					rt := &p.Tasks[release.Task]
					require.Equal(t, Compute, rt.Kind, "%s waits for %s", p.FiringName(f), p.FiringName(a))
					dev := p.Streams[rt.Streams[0]].Device
					member := slices.IndexFunc(task.Streams, func(s int) bool { return p.Streams[s].Device == dev })
					require.GreaterOrEqual(t, member, 0, "%s waits for %s, of one of its devices", p.FiringName(f), p.FiringName(a))
					// … which the device runs before it reads what f gathers.
					order := p.Streams[rt.Streams[0]].Order
					first := slices.IndexFunc(order, func(g int) bool {
						return p.Firings[g].Micro == fi.Micro && slices.ContainsFunc(p.Tasks[p.Firings[g].Task].Reads, func(u Use) bool { return u.Reg == task.Writes[member] })
					})
					require.Less(t, slices.Index(order, a), first, "%s waits for %s", p.FiringName(f), p.FiringName(a))
					require.True(t, slices.ContainsFunc(rt.Reads, func(u Use) bool { return isGathered(p, u.Reg) }),
						"%s waits for %s, which reads a gathered weight", p.FiringName(f), p.FiringName(a))
				}
			}
			require.Positive(t, gathers)
			require.Positive(t, bounded, "later layers' gathers wait for earlier layers' release")

			var b bytes.Buffer
			require.NoError(t, Encode(&b, p))
			q, err := Decode(bytes.NewReader(b.Bytes()))
			require.NoError(t, err)
			require.Equal(t, p.Firings, q.Firings, "After survives the round trip")
			e1, _ := p.Deps()
			e2, _ := q.Deps()
			require.Equal(t, e1, e2)

			st, err := ParseStrategy(c.strategy, 8)
			require.NoError(t, err)
			st.Prefetch = 0
			inline := compileOnGPUs(t, c.model, st.String(), 8)
			for _, task := range inline.Tasks {
				if task.Kind == AllGather && isGathered(inline, task.Writes[0]) {
					for _, s := range task.Streams {
						require.Equal(t, "compute", inline.Streams[s].Name, "%s: in line without prefetch", task.Name)
					}
				}
			}
			for _, fi := range inline.Firings {
				require.Empty(t, fi.After)
			}
		})
	}
}

// A prefetch plan's After is checked as it is read: not the firing
// itself, and not into a cycle (a gather waiting for a reader of what it
// gathers would deadlock). TestDecodeRejectsBadFileEntries checks that
// it names a firing.
func TestDecodeRejectsBadAfter(t *testing.T) {
	p := compileOnGPUs(t, "mlp", "dp=2,mb=2,zero=3,prefetch=1", 8)
	gather := slices.IndexFunc(p.Firings, func(f Firing) bool {
		return p.Tasks[f.Task].Kind == AllGather && isGathered(p, p.Tasks[f.Task].Writes[0])
	})
	require.GreaterOrEqual(t, gather, 0)
	task := &p.Tasks[p.Firings[gather].Task]
	reader := slices.IndexFunc(p.Firings, func(f Firing) bool {
		return f.Micro == p.Firings[gather].Micro && slices.ContainsFunc(p.Tasks[f.Task].Reads, func(u Use) bool { return u.Reg == task.Writes[0] })
	})
	require.GreaterOrEqual(t, reader, 0)
	requireDecodeRejectsAll(t, p, []rejection{
		{"itself", "want another firing", func(p *Plan) { p.Firings[gather].After = []int{gather} }},
		{"cycle", "is ordered after it", func(p *Plan) { p.Firings[gather].After = []int{reader} }},
	})
}

// On CPU devices, whose communication runs on the compute stream, prefetch
// moves a layer's gathers ahead of the layer before it on that stream:
// some gather comes before a task reading another layer's gathered weight.
func TestZeroPrefetchOnCPU(t *testing.T) {
	for _, prefetch := range []string{"", ",prefetch=1"} {
		p := compileZeroTP(t, "mlp", "dp=2,mb=2,zero=3"+prefetch, 8)
		compute := p.Streams[slices.IndexFunc(p.Streams, func(s Stream) bool { return s.Device == 0 && s.Name == "compute" })]
		ahead := false
		pending := map[int]bool{} // gathered registers not yet read
		for _, f := range compute.Order {
			task := &p.Tasks[p.Firings[f].Task]
			if task.Kind == AllGather && isGathered(p, task.Writes[0]) {
				pending[task.Writes[0]] = true
				continue
			}
			for _, u := range task.Reads {
				if isGathered(p, u.Reg) {
					delete(pending, u.Reg)
				}
			}
			if len(pending) > 0 {
				ahead = true // a gathered weight waits while another is read
			}
		}
		require.Equal(t, prefetch != "", ahead, "prefetch %q", prefetch)
	}
}

// Prefetch reaches at most the model's other layers: deeper would only
// say "all of them", which the strategy should say plainly.
func TestZeroPrefetchBeyondLayers(t *testing.T) {
	const model = "gpt2s-blocks:layers=4,hidden=64,heads=4,seq=16"
	layers, err := Layers(model)
	require.NoError(t, err)
	compileOnGPUs(t, model, "dp=2,zero=3,prefetch="+strconv.Itoa(layers-1), 8)
	st, err := ParseStrategy("dp=2,zero=3,prefetch="+strconv.Itoa(layers), 8)
	require.NoError(t, err)
	c, err := topology.Resolve("dgx-a100")
	require.NoError(t, err)
	d, err := DevicesFromCluster(c, st.Devices(), false)
	require.NoError(t, err)
	_, err = Compile(Config{Model: model, Batch: 8, Strategy: st, Optimizer: adam, Cluster: c.Name, Devices: d})
	require.ErrorIs(t, err, ErrInfeasible)
	require.ErrorContains(t, err, "prefetch="+strconv.Itoa(layers)+": the model has "+strconv.Itoa(layers)+" layers, so at most "+strconv.Itoa(layers-1))
}
