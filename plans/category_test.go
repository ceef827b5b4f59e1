package plans

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/units"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mlpParams are the mlp's parameter sizes in f32 (784-256-256-10).
var mlpParams = units.Bytes(4 * ((784*256 + 256) + (256*256 + 256) + (256*10 + 10)))

// rawByCategory sums device d's register bytes by category, unaligned.
func rawByCategory(p *Plan, d int) ByCategory {
	var b ByCategory
	for r, c := range p.Categories() {
		if p.Registers[r].Device == d {
			b[c] += p.Registers[r].Bytes()
		}
	}
	return b
}

func compileMLP(t *testing.T, strategy string, opt graph.Optimizer) *Plan {
	t.Helper()
	st, err := ParseStrategy(strategy, 8)
	require.NoError(t, err)
	p, err := Compile(Config{Model: "mlp", Batch: 8, Strategy: st, Optimizer: opt, Devices: devs(st.Devices(), 0)})
	require.NoError(t, err)
	return p
}

// The persistent categories of the mlp's device 0, known from its
// parameters W: SGD keeps no state, momentum W, Adam 2W; ZeRO stage 1 over
// two replicas halves the state and adds the replica's master half of the
// weights to it (a copy only the optimizer needs, so plain SGD's state is
// not zero under ZeRO), and stage 3 halves the weights as well and keeps
// no master. Every non-persistent register is a gradient of a weight only
// on the way to an update.
func TestCategoriesKnownAnswers(t *testing.T) {
	sgd := graph.SGD{LR: 0.1}
	momentum := graph.SGD{LR: 0.1, Momentum: 0.9}
	adam := graph.Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	w := mlpParams
	for _, tt := range []struct {
		strategy           string
		opt                graph.Optimizer
		weights, optimizer units.Bytes
	}{
		{"single", sgd, w, 0},
		{"single", momentum, w, w},
		{"single", adam, w, 2 * w},
		{"dp=2", adam, w, 2 * w},
		{"dp=2,zero=1", sgd, w, w / 2},
		{"dp=2,zero=1", adam, w, 2*w/2 + w/2},
		{"dp=2,mb=2,zero=2", adam, w, 2*w/2 + w/2},
		{"dp=2,mb=2,zero=3", adam, w / 2, 2 * w / 2},
		{"pp=3,mb=2", adam, 0, 0}, // split over stages: checked as a sum below
	} {
		t.Run(tt.strategy+"/"+tt.opt.Name(), func(t *testing.T) {
			p := compileMLP(t, tt.strategy, tt.opt)
			if tt.weights == 0 {
				var sum ByCategory
				for d := range p.Devices {
					b := rawByCategory(p, d)
					sum[Weights] += b[Weights]
					sum[Optimizer] += b[Optimizer]
				}
				require.Equal(t, w, sum[Weights])
				require.Equal(t, 2*w, sum[Optimizer])
				return
			}
			b := rawByCategory(p, 0)
			require.Equal(t, tt.weights, b[Weights], "weights")
			require.Equal(t, tt.optimizer, b[Optimizer], "optimizer")
			require.Positive(t, b[Gradients])
			require.Positive(t, b[Activations])
			require.Positive(t, b[Temporaries], "inputs at least")
		})
	}
}

// Each kind of register lands where DESIGN's roles put it, whatever it is
// called: inputs and ZeRO's gathered weights are temporaries,
// recomputations and the forward pass's outputs (sequence parallelism's
// gathers and scatters of them too) activations, accumulators and ZeRO's
// gradient parts gradients, and the backward pass's gradients of
// activations temporaries.
func TestCategoriesByRole(t *testing.T) {
	adam := graph.Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	for _, c := range []struct{ model, strategy string }{
		{"mlp", "pp=2,mb=2,recompute=full"}, {"mlp", "dp=2,mb=2,zero=3"}, {"mlp", "dp=2,mb=2,zero=1"},
		{"gpt:layers=2,hidden=32,heads=2,seq=8,vocab=64", "tp=2,sp=on,pp=2,mb=2,recompute=selective"},
		{"gpt:layers=2,hidden=32,heads=2,seq=8,vocab=64", "dp=2,tp=2,sp=on,mb=2,zero=3"},
	} {
		strategy := c.model + " " + c.strategy
		st, err := ParseStrategy(c.strategy, 8)
		require.NoError(t, err)
		p, err := Compile(Config{Model: c.model, Batch: 8, Strategy: st, Optimizer: adam, Devices: devs(st.Devices(), 0)})
		require.NoError(t, err)
		cat := p.Categories()
		for _, task := range p.Tasks {
			for _, r := range task.Writes {
				reg, c := &p.Registers[r], cat[r]
				switch {
				case reg.Persistent:
					require.Contains(t, []Category{Weights, Optimizer}, c, reg.Name)
				case task.Kind == Input, task.Kind == AllGather && !task.Sum:
					require.Equal(t, Temporaries, c, reg.Name)
				case task.Kind == Accumulate, task.Kind == ReduceScatter && !task.Sum:
					require.Equal(t, Gradients, c, reg.Name)
				case strings.HasSuffix(reg.Name, "@recompute"), task.Phase == "forward":
					require.Equal(t, Activations, c, reg.Name)
				case task.Phase == "backward" && task.Kind == Compute:
					require.Contains(t, []Category{Gradients, Temporaries}, c, reg.Name)
				}
			}
			if task.Phase == "update" {
				for _, u := range task.Reads {
					if !p.Registers[u.Reg].Persistent {
						require.Equal(t, Gradients, cat[u.Reg], p.Registers[u.Reg].Name)
					}
				}
			}
		}
		for c, b := range rawByCategory(p, 0) {
			require.Positive(t, b, "%s: %v", strategy, Category(c))
		}
	}
}

// UnsharedByCategory divides a device's persistent memory into weights
// and optimizer state and its unshared memory into all five, exactly,
// also for devices a plan lists through others.
func TestUnsharedByCategorySums(t *testing.T) {
	shared, err := Compile(Config{Model: "mlp", Batch: 8, Strategy: Strategy{DP: 4, PP: 1, MB: 2, Zero: 1, Sched: OneFOneB},
		Optimizer: graph.SGD{LR: 0.1}, Devices: devs(4, 0), SharedDP: true})
	require.NoError(t, err)
	plans := map[string]*Plan{"dp=4,mb=2,zero=1 shared": shared}
	for _, strategy := range []string{"single", "dp=2,pp=2,mb=2", "dp=2,mb=2,zero=2", "dp=4,mb=2,zero=3"} {
		plans[strategy] = compileMLPAdam(t, strategy)
	}
	for strategy, p := range plans {
		for d := range p.Devices {
			u, m := p.UnsharedByCategory(d), p.Memory[d]
			require.Equal(t, m.Persistent, u[Weights]+u[Optimizer], "%s device %d", strategy, d)
			require.Equal(t, m.Unshared, u.Total(), "%s device %d", strategy, d)
		}
	}
}

// The out-of-memory error names the categories after what it said before.
func TestOutOfMemoryNamesCategories(t *testing.T) {
	st, _ := ParseStrategy("single", 64)
	_, err := Compile(Config{Model: "mnist-cnn", Batch: 64, Strategy: st, Optimizer: graph.SGD{LR: 0.1, Momentum: 0.9}, Devices: devs(1, 8*units.MiB)})
	require.ErrorIs(t, err, ErrOutOfMemory)
	require.Regexp(t, `of it parameters and optimizer state\): weights \S+ \S+, optimizer state \S+ \S+; `+
		`without reuse activations \S+ \S+, gradients \S+ \S+, temporaries \S+ \S+$`, err.Error())
}

func TestCategoryNames(t *testing.T) {
	var names []string
	for c := range Category(NumCategories) {
		names = append(names, c.String())
	}
	require.Equal(t, []string{"weights", "optimizer", "gradients", "activations", "temporaries"}, names)
	require.Equal(t, "category(9)", Category(9).String())
	_, err := Category(9).MarshalText()
	require.Error(t, err)
	b := ByCategory{Weights: 2 * units.KiB, Gradients: 1}
	require.Equal(t, "weights 2.00 KiB, gradients 1 B", b.String())
	require.Equal(t, "nothing", ByCategory{}.String())
	js, err := b.MarshalJSON()
	require.NoError(t, err)
	require.JSONEq(t, `{"weights":2048,"optimizer":0,"gradients":1,"activations":0,"temporaries":0}`, string(js))
}

// A plan's derived views may be asked for from several goroutines at once
// (run with -race: the first callers derive them together).
func TestCategoriesConcurrent(t *testing.T) {
	p := compileMLP(t, "dp=2,mb=2", graph.Adam{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	want := slices.Clone(p.categorize())
	var wg sync.WaitGroup
	got := make([][]Category, 4)
	for i := range got {
		wg.Go(func() {
			_, err := p.Deps()
			assert.NoError(t, err)
			got[i] = p.Categories()
		})
	}
	wg.Wait()
	for _, g := range got {
		require.Equal(t, want, g)
	}
}

// ByCategory reads back what it writes, and names an unknown category.
func TestByCategoryJSON(t *testing.T) {
	want := ByCategory{Weights: 1 << 20, Gradients: 7, Temporaries: 3 << 30}
	b, err := json.Marshal(want)
	require.NoError(t, err)
	var got ByCategory
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, want, got)
	err = json.Unmarshal([]byte(`{"weights": 4, "buffers": 8}`), &got)
	require.ErrorContains(t, err, `plans: unknown register category "buffers" (want weights, optimizer, gradients, activations, temporaries)`)
}
