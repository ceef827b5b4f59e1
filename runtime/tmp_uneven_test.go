package runtime

import "testing"

func TestTmpUnevenZero(t *testing.T) {
	const iters = 3
	_, ref, want := trainPlan(t, "mlp", "single", 8, 1, iters)
	rs, _ := ref.Store()
	for _, s := range []string{"dp=2,mb=3:1,zero=1", "dp=2,mb=3:1,zero=2", "dp=2,mb=3:1,zero=3", "dp=2,mb=3:1,zero=3,prefetch=1", "dp=2,pp=2,mb=3:1,zero=3,prefetch=1", "dp=2,pp=2,mb=3:1,zero=2,sched=gpipe"} {
		t.Run(s, func(t *testing.T) {
			_, r, got := trainPlan(t, "mlp", s, 8, 8, iters)
			st, _ := r.Store()
			for it := range iters {
				t.Log(want.Loss[it], got.Loss[it])
			}
			for _, name := range rs.Names() {
				w, _ := rs.Get(name)
				g, ok := st.Get(name)
				if !ok || relDiff(g, w) > 1e-5 {
					t.Errorf("%s %v %v", name, ok, relDiff(g, w))
				}
			}
		})
	}
}
