package plans

import (
	"fmt"
	"slices"
	"strings"
)

// PlaceDevices returns the devices a plan of strategy s takes from pool, in
// the plan's order (device (replica·pp + stage)·tp + rank): without
// s.Place, the pool's first s.Devices(); with it, for each replica, stage
// and tensor-parallel rank in that order, the next unused device of the
// stage's type, in the pool's order, so that a stage's group keeps to
// neighbouring devices (one machine's, in a cluster's order) and replicas
// take the machines after. The error says which stage runs out of which
// type, by how many devices, or which entry names no type or several.
func (s Strategy) PlaceDevices(pool []Device) ([]Device, error) {
	n := s.Devices()
	if s.DeviceNames != nil {
		return s.namedDevices(pool)
	}
	if s.Place == nil {
		if n > len(pool) {
			return nil, fmt.Errorf("%w: %s needs %d devices, %d given", ErrInfeasible, s, n, len(pool))
		}
		return pool[:n], nil
	}
	if len(s.Place) != s.PP {
		return nil, fmt.Errorf("%w: %s: place gives %d device types for pp=%d stages", ErrInfeasible, s, len(s.Place), s.PP)
	}
	types, err := placeTypes(s.Place, pool)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInfeasible, s, err)
	}
	// need counts each type's devices over all stages, for the error.
	need := map[string]int{}
	for _, t := range types {
		need[t] += s.DP * s.TPDegree()
	}
	next := map[string]int{} // the pool index each type's search resumes at
	used := make([]Device, 0, n)
	tp := s.TPDegree()
	for range s.DP {
		for st, t := range types {
			for range tp {
				i := next[t]
				for i < len(pool) && pool[i].Type != t {
					i++
				}
				if i == len(pool) {
					have := 0
					for _, d := range pool {
						if d.Type == t {
							have++
						}
					}
					return nil, fmt.Errorf("%w: %s: stage %d runs on %s, and the stages placed there need %d such devices; %d given (%d short)",
						ErrInfeasible, s, st, t, need[t], have, need[t]-have)
				}
				used = append(used, pool[i])
				next[t] = i + 1
			}
		}
	}
	return used, nil
}

// namedDevices returns the devices s.DeviceNames names, from pool. The
// error says which replica's stage and rank names a device the pool does
// not have, or names one twice.
func (s Strategy) namedDevices(pool []Device) ([]Device, error) {
	if len(s.DeviceNames) != s.Devices() {
		return nil, fmt.Errorf("%w: %s: devices names %d devices for the %d the strategy runs on", ErrInfeasible, s, len(s.DeviceNames), s.Devices())
	}
	index := make(map[string]int, len(pool))
	for i, d := range pool {
		index[d.Name] = i
	}
	tp, pp := s.TPDegree(), s.PP
	where := func(i int) string {
		if tp == 1 {
			return fmt.Sprintf("replica %d's stage %d", i/pp, i%pp)
		}
		return fmt.Sprintf("replica %d's stage %d, tensor-parallel rank %d", i/tp/pp, i/tp%pp, i%tp)
	}
	first := make(map[string]int, len(s.DeviceNames))
	used := make([]Device, len(s.DeviceNames))
	for i, name := range s.DeviceNames {
		j, ok := index[name]
		if !ok {
			return nil, fmt.Errorf("%w: devices: %s is %q, which the cluster does not have (its devices: %s)", ErrInfeasible, where(i), name, someNames(pool, 8))
		}
		if k, dup := first[name]; dup {
			return nil, fmt.Errorf("%w: devices: %q is named for %s and for %s: a device takes one place in a plan", ErrInfeasible, name, where(k), where(i))
		}
		first[name] = i
		used[i] = pool[j]
	}
	return used, nil
}

// someNames lists the first n devices' names of pool, and how many more.
func someNames(pool []Device, n int) string {
	var names []string
	for _, d := range pool[:min(n, len(pool))] {
		names = append(names, d.Name)
	}
	if len(pool) > n {
		names = append(names, fmt.Sprintf("… %d more", len(pool)-n))
	}
	return strings.Join(names, ", ")
}

// placeTypes resolves place's entries against the device types of pool:
// an exact name (case aside), else the one type whose name contains the
// entry.
func placeTypes(place []string, pool []Device) ([]string, error) {
	known := poolTypes(pool)
	out := make([]string, len(place))
	for i, want := range place {
		var match []string
		for _, t := range known {
			if strings.EqualFold(t, want) {
				match = []string{t}
				break
			}
			if strings.Contains(strings.ToLower(t), strings.ToLower(want)) {
				match = append(match, t)
			}
		}
		switch len(match) {
		case 0:
			return nil, fmt.Errorf("place: stage %d: no device of type %q (the devices are of types %s)", i, want, strings.Join(known, ", "))
		case 1:
			out[i] = match[0]
		default:
			return nil, fmt.Errorf("place: stage %d: %q names several device types (%s): give more of the name", i, want, strings.Join(match, ", "))
		}
	}
	return out, nil
}

// Placements returns the placements worth comparing for a pipeline of pp
// stages over the device types of pool (each type named short, as A100
// for A100-SXM4-40GB, where that names it alone): the types in blocks of neighbouring
// stages (every order of every choice of types, every cut of the stages
// into blocks), those whose devices differ from the pool's order and from
// each other's, for a strategy of dp replicas and tp-way groups.
// Interleaving types stage by stage is left out: it adds transfers between
// types for nothing a block does not give. With one type there is nothing
// to choose, and Placements returns none.
func Placements(pool []Device, dp, tp, pp int) [][]string {
	types := poolTypes(pool)
	if len(types) < 2 {
		return nil
	}
	base := Strategy{DP: dp, TP: tp, PP: pp, MB: 1}
	if tp < 2 {
		base.TP = 0
	}
	seen := map[string]bool{}
	if devs, err := base.PlaceDevices(pool); err == nil {
		seen[deviceKey(devs)] = true
	}
	var out [][]string
	var blocks func(place []string, left []string)
	blocks = func(place []string, left []string) {
		if len(place) == pp {
			st := base
			st.Place = slices.Clone(place)
			devs, err := st.PlaceDevices(pool)
			if err != nil || seen[deviceKey(devs)] {
				return
			}
			seen[deviceKey(devs)] = true
			for i, t := range st.Place {
				st.Place[i] = shortType(t, types)
			}
			out = append(out, st.Place)
			return
		}
		for i, t := range left {
			rest := slices.Delete(slices.Clone(left), i, i+1)
			for k := 1; len(place)+k <= pp; k++ {
				next := slices.Clone(place)
				for range k {
					next = append(next, t)
				}
				blocks(next, rest)
			}
		}
	}
	blocks(nil, types)
	return out
}

// shortType is the name a placement gives type t among types: the part
// of it before the first '-' (A100 for A100-SXM4-40GB) when no other type
// contains that, else the whole name.
func shortType(t string, types []string) string {
	short, _, _ := strings.Cut(t, "-")
	for _, o := range types {
		if o != t && strings.Contains(strings.ToLower(o), strings.ToLower(short)) {
			return t
		}
	}
	return short
}

// poolTypes lists the device types of pool in order of first appearance.
func poolTypes(pool []Device) []string {
	var types []string
	for _, d := range pool {
		if !slices.Contains(types, d.Type) {
			types = append(types, d.Type)
		}
	}
	return types
}

func deviceKey(devs []Device) string {
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.Name
	}
	return strings.Join(names, "\x00")
}
