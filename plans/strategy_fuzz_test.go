package plans

import (
	"slices"
	"testing"
)

// ParseStrategy never panics, and what it accepts is a usable strategy.
func FuzzParseStrategy(f *testing.F) {
	for _, s := range []string{"single", "", "dp=2", "pp=2,mb=4,sched=gpipe", "dp=2,pp=2,mbs=8,sched=1f1b",
		"slots=1", "tp=2", "dp=0", "mb=2,mbs=4", "dp=2,dp=2", " dp = 2 ", "pp=2,mbs=3",
		"dp=4294967296,mbs=4294967296", "dp=2,mb=3:1", "dp=3,pp=2,mb=1:2:1", "dp=2,mbs=8,mb=auto", "dp=2,mb=1048576:1048576",
		"pp=2,layers=3:1", "pp=2,layers=auto", "pp=2,layers=auto,mbs=8,mb=auto", "dp=3,mb=auto:8", "pp=2,recompute=full",
		"dp=2,zero=1", "dp=2,zero=2", "dp=4,pp=2,mb=4,zero=3", "dp=2,mb=3:1,zero=2", "dp=2,mb=2:2,zero=3", "dp=2,mbs=8,mb=auto,zero=3",
		"dp=2,zero=9", "zero=3", "dp=2,tp=2,zero=2", "tp=2,zero=1", "dp=2,tp=4,sp=on,pp=2,mb=2,zero=3", "dp=2,zero=02",
		"dp=2,zero=3,prefetch=1", "dp=2,zero=2,prefetch=1", "dp=4,pp=2,mb=4,zero=3,prefetch=2", "dp=2,zero=3,prefetch=-1", "dp=2,zero=3,prefetch=01",
		"dp=2,bucket=25MiB", "bucket=1KiB", "dp=2,bucket=0", "dp=2,bucket=1.5KiB", "dp=2,bucket=3B,zero=1"} {
		f.Add(s, 64)
	}
	f.Add("dp=2,pp=2,place=v100:a100,layers=auto", 64)
	f.Add("dp=2,devices=host/cpu0:1+host/cpu0:0", 64)
	f.Add("pp=2,devices=a+b,place=v100:a100", 64)
	f.Fuzz(func(t *testing.T, s string, batch int) {
		st, err := ParseStrategy(s, batch)
		if err != nil {
			return
		}
		if st.DP < 1 || st.PP < 1 || st.MB < 1 || st.MaxSlots < 0 {
			t.Fatalf("ParseStrategy(%q, %d) = %+v: counts below 1", s, batch, st)
		}
		if st.Shares != nil && (len(st.Shares) != st.DP || slices.Min(st.Shares) < 1 || slices.Max(st.Shares) != st.MB || st.TotalMicros() > maxCount) {
			t.Fatalf("ParseStrategy(%q, %d) = %+v: shares are not one count ≥ 1 per replica, the largest MB", s, batch, st)
		}
		if st.AutoShares && (batch < 1 || st.TotalMicros() < st.DP || batch%st.TotalMicros() != 0) {
			t.Fatalf("ParseStrategy(%q, %d) = %+v: mb=auto with no micro-batch per replica", s, batch, st)
		}
		if st.Layers != nil && (len(st.Layers) != st.PP || slices.Min(st.Layers) < 1) {
			t.Fatalf("ParseStrategy(%q, %d) = %+v: layers are not one count ≥ 1 per stage", s, batch, st)
		}
		if (st.Layers != nil || st.AutoLayers) && st.PP < 2 || st.AutoLayers && st.AutoShares {
			t.Fatalf("ParseStrategy(%q, %d) = %+v: layers without a pipeline, or two searches at once", s, batch, st)
		}
		if st.AutoShares || st.Shares != nil || st.Layers != nil {
			if back, err := ParseStrategy(st.String(), batch); err != nil || !slices.Equal(back.Shares, st.Shares) ||
				back.MB != st.MB || back.TotalMicros() != st.TotalMicros() || !slices.Equal(back.Layers, st.Layers) {
				t.Fatalf("ParseStrategy(%q, %d) = %+v, whose String %q parses as %+v (%v)", s, batch, st, st.String(), back, err)
			}
		}
		if st.Zero < 0 || st.Zero > 3 || st.Zero > 0 && st.DP < 2 {
			t.Fatalf("ParseStrategy(%q, %d) = %+v: a ZeRO stage the compiler refuses", s, batch, st)
		}
		if st.Prefetch < 0 || st.Prefetch > 0 && st.Zero != 3 {
			t.Fatalf("ParseStrategy(%q, %d) = %+v: a prefetch the compiler refuses", s, batch, st)
		}
		if st.Zero > 0 {
			if back, err := ParseStrategy(st.String(), batch); err != nil || back.Zero != st.Zero || back.Prefetch != st.Prefetch {
				t.Fatalf("ParseStrategy(%q, %d) = %+v, whose String %q parses as %+v (%v)", s, batch, st, st.String(), back, err)
			}
		}
		if st.Place != nil {
			if len(st.Place) != st.PP || slices.Contains(st.Place, "") {
				t.Fatalf("ParseStrategy(%q, %d) = %+v: place is not one type per stage", s, batch, st)
			}
			if back, err := ParseStrategy(st.String(), batch); err != nil || !slices.Equal(back.Place, st.Place) {
				t.Fatalf("ParseStrategy(%q, %d) = %+v, whose String %q parses as %+v (%v)", s, batch, st, st.String(), back, err)
			}
		}
		if st.DeviceNames != nil {
			if len(st.DeviceNames) != st.Devices() || st.Place != nil || slices.Contains(st.DeviceNames, "") {
				t.Fatalf("ParseStrategy(%q, %d) = %+v: devices do not name each of the strategy's devices", s, batch, st)
			}
			if back, err := ParseStrategy(st.String(), batch); err != nil || !slices.Equal(back.DeviceNames, st.DeviceNames) {
				t.Fatalf("ParseStrategy(%q, %d) = %+v, whose String %q parses as %+v (%v)", s, batch, st, st.String(), back, err)
			}
		}
		if st.Bucket < 0 || st.Bucket > 0 && st.DP < 2 {
			t.Fatalf("ParseStrategy(%q, %d) = %+v: a bucket the compiler refuses", s, batch, st)
		}
		if st.Bucket > 0 {
			if back, err := ParseStrategy(st.String(), batch); err != nil || back.Bucket != st.Bucket {
				t.Fatalf("ParseStrategy(%q, %d) = %+v, whose String %q parses as %+v (%v)", s, batch, st, st.String(), back, err)
			}
		}
		if st.Sched != GPipe && st.Sched != OneFOneB {
			t.Fatalf("ParseStrategy(%q, %d) = %+v: unknown schedule", s, batch, st)
		}
	})
}
