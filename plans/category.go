package plans

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/flowkit/flowkit/units"
)

// Category is what a register holds, for saying what fills a device's
// memory. Categories are derived from the plan's structure (task kinds,
// phases, the optimizer's updates), not from names, so that a plan read
// from a file has them too (Plan.Categories).
type Category uint8

const (
	// Weights are the persistent copies of the parameters the passes
	// read: whole, or under ZeRO stage 3 a replica's part, the weight's
	// only persistent copy.
	Weights Category = iota
	// Optimizer is optimizer state: the persistent registers an update
	// mutates besides the weight (Adam's m and v, SGD's momentum), and
	// under ZeRO stages 1 and 2 the replica's part of a weight it updates
	// and gathers back (Register.Master), which only the optimizer needs.
	Optimizer
	// Gradients are the weights' gradients on their way to an update:
	// a backward op's gradient of a weight, its accumulator over the
	// micro-batches, its all-reduced or reduce-scattered parts and their
	// accumulators, and transfers of them.
	Gradients
	// Activations are the values of the forward pass: forward ops'
	// outputs, kept until the backward pass reads them, the backward
	// pass's recomputations of them, and their copies (a stage's input
	// received from the previous one, a tensor-parallel all-reduce's sum).
	Activations
	// Temporaries are the rest: the inputs a micro-batch loads, ZeRO
	// stage 3's weights gathered for a pass, and the backward pass's
	// gradients of activations (from the loss's seed down to the stage's
	// input), with their copies and collectives.
	Temporaries
	// NumCategories is the number of categories.
	NumCategories = iota
)

var categoryNames = [NumCategories]string{"weights", "optimizer", "gradients", "activations", "temporaries"}

// String is the category's name: weights, optimizer, gradients,
// activations or temporaries.
func (c Category) String() string {
	if int(c) < len(categoryNames) {
		return categoryNames[c]
	}
	return fmt.Sprintf("category(%d)", c)
}

// MarshalText writes the category's name.
func (c Category) MarshalText() ([]byte, error) {
	if int(c) >= NumCategories {
		return nil, fmt.Errorf("plans: unknown register category %d", c)
	}
	return []byte(c.String()), nil
}

// UnmarshalText reads a category's name, as MarshalText writes it.
func (c *Category) UnmarshalText(b []byte) error {
	for i, name := range categoryNames {
		if string(b) == name {
			*c = Category(i)
			return nil
		}
	}
	return fmt.Errorf("plans: unknown register category %q (want %s)", b, strings.Join(categoryNames[:], ", "))
}

// ByCategory is an amount of memory per category, indexed by Category.
type ByCategory [NumCategories]units.Bytes

// Total is the sum over the categories.
func (b ByCategory) Total() units.Bytes {
	var t units.Bytes
	for _, x := range b {
		t += x
	}
	return t
}

// MarshalJSON writes b as an object keyed by category name.
func (b ByCategory) MarshalJSON() ([]byte, error) {
	m := make(map[string]units.Bytes, NumCategories)
	for c, x := range b {
		m[Category(c).String()] = x
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes: the output of 'flowsim
// simulate --json' and 'flowrun exec --json' reads back into LiveMemory.
func (b *ByCategory) UnmarshalJSON(data []byte) error {
	var m map[Category]units.Bytes
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*b = ByCategory{}
	for c, x := range m {
		b[c] = x
	}
	return nil
}

// String lists the categories' amounts, e.g. "weights 1.2 GiB, optimizer
// 2.4 GiB, ...", leaving out those of none.
func (b ByCategory) String() string {
	var parts []string
	for c, x := range b {
		if x > 0 {
			parts = append(parts, fmt.Sprintf("%v %v", Category(c), x))
		}
	}
	if parts == nil {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// Categories returns every register's category, by register, derived
// once. A persistent register is optimizer state if an update task writes
// it other than as its first write (the weight), or if it is a ZeRO
// master part; else a weight. Of the others, a register is a gradient if
// an update reads it as its gradient or it feeds one through
// accumulations, collectives, transfers and bucket copies; a temporary if
// an input task writes it, if it is a weight gathered over the replicas
// (ZeRO stage 3) or a bucket of weights packed for or gathered by an
// all-gather (ZeRO with Strategy.Bucket), or if its value derives from the
// loss's gradient seed (a backward compute task that reads nothing); else
// an activation.
func (p *Plan) Categories() []Category {
	p.derive.Lock()
	defer p.derive.Unlock()
	if p.categories == nil {
		p.categories = p.categorize()
	}
	return p.categories
}

func (p *Plan) categorize() []Category {
	cat := make([]Category, len(p.Registers))
	known := make([]bool, len(p.Registers))
	set := func(r int, c Category) {
		if !known[r] {
			cat[r], known[r] = c, true
		}
	}
	// Persistent registers and the gradients' ends: the updates.
	var grads []int
	for i := range p.Tasks {
		t := &p.Tasks[i]
		if t.Phase != "update" {
			continue
		}
		for k, r := range t.Writes {
			if k > 0 && p.Registers[r].Persistent {
				set(r, Optimizer)
			}
		}
		for _, u := range t.Reads {
			if !p.Registers[u.Reg].Persistent {
				grads = append(grads, u.Reg)
			}
		}
	}
	for r := range p.Registers {
		if reg := &p.Registers[r]; reg.Persistent {
			if reg.Master {
				set(r, Optimizer)
			}
			set(r, Weights)
		}
	}
	// Gradients: back from the updates, through everything but compute.
	for len(grads) > 0 {
		r := grads[len(grads)-1]
		grads = grads[:len(grads)-1]
		if known[r] {
			continue
		}
		set(r, Gradients)
		for _, w := range p.Registers[r].Writers {
			if t := &p.Tasks[w]; t.Kind != Compute {
				for _, u := range t.Reads {
					grads = append(grads, u.Reg)
				}
			}
		}
	}
	// Temporaries: inputs and gathered weights, then whatever the loss's
	// seed flows into (tasks are in no particular order: the flow is
	// followed from register to readers).
	readers := make([][]int, len(p.Registers))
	var flow []int
	for i := range p.Tasks {
		t := &p.Tasks[i]
		for _, u := range t.Reads {
			readers[u.Reg] = append(readers[u.Reg], i)
		}
		switch {
		case t.Kind == Input || t.Kind == AllGather && !t.Sum || t.Kind == Pack: // a bucket of gradients is a gradient already (set above)
			for _, r := range t.Writes {
				if !p.Registers[r].Persistent {
					set(r, Temporaries)
				}
			}
		case t.Kind == Compute && t.Phase == "backward" && len(t.Reads) == 0:
			flow = append(flow, t.Writes...)
		}
	}
	seen := make([]bool, len(p.Registers))
	for len(flow) > 0 {
		r := flow[len(flow)-1]
		flow = flow[:len(flow)-1]
		if seen[r] || p.Registers[r].Persistent {
			continue
		}
		seen[r] = true
		set(r, Temporaries)
		for _, t := range readers[r] {
			flow = append(flow, p.Tasks[t].Writes...)
		}
	}
	for r := range p.Registers {
		set(r, Activations)
	}
	return cat
}

// UnsharedByCategory is what device d's registers take without reuse, by
// category, each register rounded up to the arena's alignment as the
// planner places it: the weights and optimizer state sum to d's
// Memory.Persistent (they are never shared), the whole to its
// Memory.Unshared.
func (p *Plan) UnsharedByCategory(d int) ByCategory {
	var b ByCategory
	cat := p.Categories()
	d = p.Listed(d)
	for r := range p.Registers {
		if reg := &p.Registers[r]; reg.Device == d {
			b[cat[r]] += roundUp(reg.Bytes())
		}
	}
	return b
}
