package plans

import (
	"fmt"
	"testing"

	"github.com/flowkit/flowkit/graph"
)

// Compiling never panics: over small models of every family and a grid
// of strategies (3,360 compiles: data, tensor, sequence and pipeline
// parallelism, interleaving, ZeRO with prefetch, recompute, uneven
// splits, ZeRO over uneven splits), each compiles or says why not. The
// grid found the sequence-parallel pipeline cut that panicked in readable.
func TestCompileNeverPanics(t *testing.T) {
	models := []string{"gpt:layers=1,hidden=64,heads=4,seq=16,vocab=128", "gpt:layers=2,hidden=32,heads=2,seq=8,vocab=64,tie=on", "llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=48,seq=8,vocab=64", "mnist-cnn", "mlp", "gpt2s-blocks:layers=2,hidden=32,heads=2,seq=8"}
	var strategies []string
	for _, tp := range []int{1, 2} {
		for _, sp := range []string{"", ",sp=on"} {
			for _, pp := range []int{1, 2, 3, 4} {
				for _, dp := range []int{1, 2} {
					for _, zero := range []int{0, 1, 3} {
						for _, mb := range []string{"1", "2", "4", "3:1"} { // 3:1 parses for dp=2 only
							for _, rc := range []string{"none", "full", "selective"} {
								strategies = append(strategies, fmt.Sprintf("dp=%d,tp=%d,pp=%d,mb=%s,zero=%d,recompute=%s%s", dp, tp, pp, mb, zero, rc, sp))
							}
						}
					}
				}
			}
		}
	}
	strategies = append(strategies, "pp=2,vpp=2,mb=4", "tp=2,sp=on,pp=2,vpp=2,mb=2", "dp=2,zero=2", "dp=2,tp=2,zero=2,mb=2", "dp=2,zero=3,prefetch=1,mb=2",
		"dp=2,tp=2,sp=on,pp=2,zero=3,prefetch=1,mb=2,recompute=selective", "dp=2,mb=3:1", "dp=2,pp=2,mb=3:1", "pp=2,layers=1:2",
		"pp=3,sched=gpipe,mb=3", "dp=2,tp=2,pp=2,vpp=2,mb=2,zero=1", "pp=4,vpp=2,mb=4", "slots=1,pp=2,mb=4",
		"dp=2,mb=3:1,zero=2", "dp=2,mb=1:3,zero=3,prefetch=1", "dp=2,tp=2,sp=on,pp=2,mb=3:1,zero=2,recompute=selective",
		"dp=2,pp=2,mb=1:3,sched=gpipe,zero=3,prefetch=2,recompute=full", "dp=3,pp=2,mb=1:2:1,zero=3,prefetch=1", "dp=2,mb=3:1,zero=3,slots=1",
		"dp=2,mbs=2,mb=auto,zero=3")
	compiles := 0
	for _, m := range models {
		for _, s := range strategies {
			st, err := ParseStrategy(s, 16)
			if err != nil {
				continue // sp=on without tp, ZeRO without dp: refused here, as they should be
			}
			compiles++
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s %s: panic %v", m, s, r)
					}
				}()
				Compile(Config{Model: m, Batch: 16, Strategy: st, Optimizer: graph.SGD{LR: 0.1}, Devices: devs(st.Devices(), 0)})
			}()
		}
	}
	if compiles < 3300 {
		t.Errorf("only %d strategies parse", compiles)
	}
}
