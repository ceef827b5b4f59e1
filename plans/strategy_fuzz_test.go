package plans

import "testing"

// ParseStrategy never panics, and what it accepts is a usable strategy.
func FuzzParseStrategy(f *testing.F) {
	for _, s := range []string{"single", "", "dp=2", "pp=2,mb=4,sched=gpipe", "dp=2,pp=2,mbs=8,sched=1f1b",
		"slots=1", "tp=2", "dp=0", "mb=2,mbs=4", "dp=2,dp=2", " dp = 2 ", "pp=2,mbs=3",
		"dp=4294967296,mbs=4294967296"} {
		f.Add(s, 64)
	}
	f.Fuzz(func(t *testing.T, s string, batch int) {
		st, err := ParseStrategy(s, batch)
		if err != nil {
			return
		}
		if st.DP < 1 || st.PP < 1 || st.MB < 1 || st.MaxSlots < 0 {
			t.Fatalf("ParseStrategy(%q, %d) = %+v: counts below 1", s, batch, st)
		}
		if st.Sched != GPipe && st.Sched != OneFOneB {
			t.Fatalf("ParseStrategy(%q, %d) = %+v: unknown schedule", s, batch, st)
		}
	})
}
