package sim

import (
	"fmt"
	"testing"

	"github.com/flowkit/flowkit/cost"
	"github.com/flowkit/flowkit/graph"
	"github.com/flowkit/flowkit/plans"
	"github.com/flowkit/flowkit/topology"
)

// benchPlan compiles a small GPT as narayanan2021 compiles its rows: one
// rank standing for its tensor-parallel group and one replica for all, on
// DGX A100 nodes whose NICs the replicas' all-reduces and the pipeline's
// transfers share.
func benchPlan(b *testing.B, strategy string, nodes int) (*plans.Plan, *topology.Cluster) {
	c, err := topology.Preset(fmt.Sprintf("dgx-a100-80gx%d", nodes))
	if err != nil {
		b.Fatal(err)
	}
	st, err := plans.ParseStrategy(strategy, 64)
	if err != nil {
		b.Fatal(err)
	}
	devs, err := plans.DevicesFromCluster(c, st.Devices(), false)
	if err != nil {
		b.Fatal(err)
	}
	p, err := plans.Compile(plans.Config{Model: "gpt:layers=8,hidden=512,heads=8,seq=256,vocab=1024", Batch: 64, Strategy: st,
		Optimizer: graph.Adam{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, Cluster: c.Name, Devices: devs, DType: graph.BF16, SharedTP: true, SharedDP: true})
	if err != nil {
		b.Fatal(err)
	}
	return p, c
}

// Pricing and link sharing from a cold communication model: most of the
// time goes to routing the replicas' collectives over the fabric.
func BenchmarkSimulate_GPT_DP4_TP8_PP4_Cold(b *testing.B) {
	p, c := benchPlan(b, "dp=4,tp=8,pp=4,mbs=1,recompute=full", 16)
	for b.Loop() {
		m := CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(c)}
		if _, err := Simulate(p, m, 3); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(p.Firings)), "firings")
}

// The event loop and link sharing, the communication model warm.
func BenchmarkSimulate_GPT_DP4_TP8_PP4_Warm(b *testing.B) {
	p, c := benchPlan(b, "dp=4,tp=8,pp=4,mbs=1,recompute=full", 16)
	m := CostModel{Compute: cost.NewComputeModel(nil), Comm: cost.NewComm(c)}
	if _, err := Simulate(p, m, 1); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Simulate(p, m, 3); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(p.Firings)), "firings")
}
