package plans

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/flowkit/flowkit/internal/yamlnode"
)

// A strategy file is the strategy grammar (ParseStrategy) written as YAML,
// for the strategies a string says badly: uneven shares, stages cut by
// hand, devices named one by one. Its keys are the grammar's; a value
// is a YAML scalar, or a list where the grammar joins counts or names
// (mb: [3, 1] is mb=3:1, layers: [3, 1] is layers=3:1, place: [v100, a100]
// is place=v100:a100, devices: [a, b] is devices=a+b). A list of stages
// may say per stage what layers, place and devices say per strategy:
//
//	dp: 2
//	pp: 2
//	mb: [3, 1]          # replica 0 runs 3 micro-batches, replica 1 one
//	stages:
//	  - layers: 3
//	    devices: [a100-0/gpu0, a100-1/gpu0]   # replica 0's, replica 1's
//	  - layers: 1
//	    devices: [v100-0/gpu0, v100-1/gpu0]
//
// A stage's devices are its dp·tp places: replica 0's tensor-parallel
// group, then replica 1's, and so on. The file is translated into the
// grammar and parsed by ParseStrategy, so both mean the same by
// construction, and a plan compiled from a file records the strategy as a
// string.

// maxStrategyFile bounds a strategy file's size.
const maxStrategyFile = 1 << 20

// IsStrategyFile reports whether a --strategy argument names a strategy
// file (it ends in .yaml or .yml) rather than a strategy string.
func IsStrategyFile(arg string) bool {
	ext := strings.ToLower(filepath.Ext(arg))
	return ext == ".yaml" || ext == ".yml"
}

// LoadStrategy returns the strategy of a command-line argument: the file
// it names (IsStrategyFile), else the string itself (ParseStrategy).
func LoadStrategy(arg string, batch int) (Strategy, error) {
	if !IsStrategyFile(arg) {
		return ParseStrategy(arg, batch)
	}
	data, err := os.ReadFile(arg)
	if err != nil {
		return Strategy{}, fmt.Errorf("plans: strategy file: %w", err)
	}
	return ParseStrategyFile(arg, data, batch)
}

// StrategyFileError is an error in a strategy file: at a line, a value
// of the wrong kind, an unknown key, or ParseStrategy's error about the
// key given there (alone, or with others: three shares for two
// replicas); for the whole file (Line 0), an error about no key of it.
type StrategyFileError struct {
	File  string
	Line  int    // 0: the file as a whole
	Field string // the key, as stages[1].devices
	Err   error
}

func (e *StrategyFileError) Error() string {
	msg := strings.TrimPrefix(e.Err.Error(), "plans: ")
	if e.Line == 0 {
		return fmt.Sprintf("plans: %s: %s", e.File, msg)
	}
	return fmt.Sprintf("plans: %s:%d: %s: %s", e.File, e.Line, e.Field, msg)
}

func (e *StrategyFileError) Unwrap() error { return e.Err }

// ParseStrategyFile parses a strategy file's contents (see above); name
// is used in errors. batch is the global batch, as for ParseStrategy.
func ParseStrategyFile(name string, data []byte, batch int) (Strategy, error) {
	str, keys, err := strategyFileString(name, data)
	if err != nil {
		return Strategy{}, err
	}
	st, err := ParseStrategy(str, batch)
	if err != nil {
		fe := &StrategyFileError{File: name, Err: err}
		if ke := (*keyError)(nil); errors.As(err, &ke) && keys[ke.key] != nil {
			fe.Line, fe.Field = keys[ke.key].Line, ke.key
		}
		return Strategy{}, fe
	}
	return st, nil
}

// strategyFileString translates a strategy file into the grammar, and
// says where each key of the string was given.
func strategyFileString(name string, data []byte) (str string, keys map[string]*yaml.Node, err error) {
	if len(data) > maxStrategyFile {
		return "", nil, fmt.Errorf("plans: %s: %d bytes; a strategy file is at most %d", name, len(data), maxStrategyFile)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return "", nil, fmt.Errorf("plans: %s: %w", name, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return "", nil, fmt.Errorf("plans: %s: empty; want a mapping of strategy keys (dp: 2, pp: 2, …)", name)
	}
	f := &strategyFile{name: name}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return "", nil, f.errAt(top, "strategy", "want a mapping of strategy keys (dp: 2, pp: 2, …), got %s", yamlnode.Describe(top))
	}
	var parts []string
	var staged stageDevices
	seen := map[string]*yaml.Node{} // by key, where it was given
	values := map[string]string{}
	add := func(n *yaml.Node, key, value string) error {
		if prev := seen[key]; prev != nil {
			return f.errAt(n, key, "given twice (also at line %d)", prev.Line)
		}
		seen[key] = n
		values[key] = value
		parts = append(parts, key+"="+value)
		return nil
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		key := k.Value
		var value string
		var err error
		switch key {
		case "dp", "tp", "pp", "vpp", "zero", "prefetch", "mbs", "slots":
			value, err = f.integer(v, key)
		case "sp":
			value, err = f.onOff(v, key)
		case "sched", "recompute", "bucket":
			value, err = f.word(v, key)
		case "mb":
			value, err = f.countsOr(v, key, ":", func(s string) bool { return s == "auto" || strings.HasPrefix(s, "auto:") })
		case "layers":
			value, err = f.countsOr(v, key, ":", func(s string) bool { return s == "auto" })
		case "place":
			value, err = f.words(v, key, ":")
		case "devices":
			value, err = f.words(v, key, "+")
		case "stages":
			if prev := seen[key]; prev != nil {
				return "", nil, f.errAt(k, key, "given twice (also at line %d)", prev.Line)
			}
			seen[key] = k
			if err := f.stages(v, add, &staged); err != nil {
				return "", nil, err
			}
			continue
		default:
			return "", nil, f.errAt(k, key, "unknown key (known: dp, tp, sp, pp, vpp, zero, prefetch, mb, mbs, layers, place, devices, stages, sched, recompute, slots, bucket)")
		}
		if err != nil {
			return "", nil, err
		}
		if err := add(k, key, value); err != nil {
			return "", nil, err
		}
	}
	if staged.at != nil {
		degree := func(key string) int {
			if d, err := strconv.Atoi(values[key]); err == nil && d > 0 {
				return d
			}
			return 1 // omitted, or refused by ParseStrategy
		}
		value, err := staged.planOrder(f, degree("dp"), degree("tp"))
		if err != nil {
			return "", nil, err
		}
		if err := add(staged.at, "devices", value); err != nil {
			return "", nil, err
		}
	}
	if len(parts) == 0 {
		return "single", seen, nil
	}
	return strings.Join(parts, ","), seen, nil
}

// strategyFile reads one file's nodes, for errors with lines.
type strategyFile struct{ name string }

func (f *strategyFile) errAt(n *yaml.Node, field, format string, args ...any) error {
	return &StrategyFileError{File: f.name, Line: n.Line, Field: field, Err: fmt.Errorf(format, args...)}
}

// scalar returns a plain scalar's text; aliases, lists and mappings are
// refused.
func (f *strategyFile) scalar(n *yaml.Node, field, want string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", f.errAt(n, field, "want %s, got %s", want, yamlnode.Describe(n))
	}
	return strings.TrimSpace(n.Value), nil
}

func (f *strategyFile) integer(n *yaml.Node, field string) (string, error) {
	s, err := f.scalar(n, field, "an integer")
	if err != nil {
		return "", err
	}
	if _, err := strconv.Atoi(s); err != nil {
		return "", f.errAt(n, field, "want an integer, got %q", s)
	}
	return s, nil
}

func (f *strategyFile) onOff(n *yaml.Node, field string) (string, error) {
	s, err := f.scalar(n, field, "true or false")
	if err != nil {
		return "", err
	}
	switch strings.ToLower(s) {
	case "true", "on":
		return "on", nil
	case "false", "off":
		return "off", nil
	}
	return "", f.errAt(n, field, "want true or false, got %q", s)
}

// word is a scalar the grammar can hold: no separator of its own in it.
func (f *strategyFile) word(n *yaml.Node, field string) (string, error) {
	s, err := f.scalar(n, field, "a word")
	if err != nil {
		return "", err
	}
	if s == "" || strings.ContainsAny(s, ",=+") {
		return "", f.errAt(n, field, "want a word without , = or +, got %q", s)
	}
	return s, nil
}

// countsOr is a list of integers joined by sep, or a scalar: one
// integer, or a word ok accepts (auto).
func (f *strategyFile) countsOr(n *yaml.Node, field, sep string, ok func(string) bool) (string, error) {
	if n.Kind == yaml.ScalarNode {
		s := strings.TrimSpace(n.Value)
		if ok(s) {
			return s, nil
		}
		if strings.Contains(s, sep) { // the grammar's own form, 3:1
			for part := range strings.SplitSeq(s, sep) {
				if _, err := strconv.Atoi(part); err != nil {
					return "", f.errAt(n, field, "want counts, as [3, 1] or 3%s1, got %q", sep, s)
				}
			}
			return s, nil
		}
		return f.integer(n, field)
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return "", f.errAt(n, field, "want a count or a list of counts, got %s", yamlnode.Describe(n))
	}
	items := make([]string, len(n.Content))
	for i, c := range n.Content {
		s, err := f.integer(c, fmt.Sprintf("%s[%d]", field, i))
		if err != nil {
			return "", err
		}
		items[i] = s
	}
	return strings.Join(items, sep), nil
}

// words is a list of words joined by sep (or one word).
func (f *strategyFile) words(n *yaml.Node, field, sep string) (string, error) {
	if n.Kind == yaml.ScalarNode {
		return f.word(n, field)
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return "", f.errAt(n, field, "want a list of names, got %s", yamlnode.Describe(n))
	}
	items := make([]string, len(n.Content))
	for i, c := range n.Content {
		s, err := f.word(c, fmt.Sprintf("%s[%d]", field, i))
		if err != nil {
			return "", err
		}
		if strings.Contains(s, sep) {
			return "", f.errAt(c, fmt.Sprintf("%s[%d]", field, i), "want one name, got %q", s)
		}
		items[i] = s
	}
	return strings.Join(items, sep), nil
}

// stages turns a list of stages into layers and place, each given for
// every stage or for none, and collects their devices, which the plan
// orders replica by replica (stageDevices.planOrder) once dp and tp are
// known.
func (f *strategyFile) stages(n *yaml.Node, add func(n *yaml.Node, key, value string) error, devices *stageDevices) error {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return f.errAt(n, "stages", "want a list of stages (each with layers, place or devices), got %s", yamlnode.Describe(n))
	}
	type stage struct {
		layers, place string
		devices       []string
	}
	stages := make([]stage, len(n.Content))
	keys := map[string]int{} // how many stages give each key
	for s, sn := range n.Content {
		field := fmt.Sprintf("stages[%d]", s)
		if sn.Kind != yaml.MappingNode {
			return f.errAt(sn, field, "want a mapping (layers, place, devices), got %s", yamlnode.Describe(sn))
		}
		given := map[string]bool{}
		for i := 0; i+1 < len(sn.Content); i += 2 {
			k, v := sn.Content[i], sn.Content[i+1]
			if given[k.Value] {
				return f.errAt(k, field+"."+k.Value, "given twice")
			}
			given[k.Value] = true
			var err error
			switch k.Value {
			case "layers":
				stages[s].layers, err = f.integer(v, field+".layers")
			case "place":
				stages[s].place, err = f.word(v, field+".place")
			case "devices":
				var names string
				names, err = f.words(v, field+".devices", "+")
				stages[s].devices = strings.Split(names, "+")
			default:
				err = f.errAt(k, field+"."+k.Value, "unknown key (a stage has layers, place and devices)")
			}
			if err != nil {
				return err
			}
			if keys[k.Value] != s {
				return f.errAt(k, field+"."+k.Value, "given for some stages only: give it for every stage or for none")
			}
			keys[k.Value]++
		}
	}
	for _, k := range []string{"layers", "place", "devices"} {
		if c := keys[k]; c > 0 && c != len(stages) {
			return f.errAt(n, "stages", "%s given for %d of %d stages: give it for every stage or for none", k, c, len(stages))
		}
	}
	join := func(get func(stage) string, sep string) string {
		var out []string
		for _, s := range stages {
			out = append(out, get(s))
		}
		return strings.Join(out, sep)
	}
	if keys["layers"] > 0 {
		if err := add(n, "layers", join(func(s stage) string { return s.layers }, ":")); err != nil {
			return err
		}
	}
	if keys["place"] > 0 {
		if err := add(n, "place", join(func(s stage) string { return s.place }, ":")); err != nil {
			return err
		}
	}
	if keys["devices"] == 0 {
		return nil
	}
	for s, st := range stages {
		devices.lists = append(devices.lists, st.devices)
		devices.nodes = append(devices.nodes, n.Content[s])
	}
	devices.at = n
	return nil
}

// stageDevices are the devices a file lists stage by stage.
type stageDevices struct {
	at    *yaml.Node   // the stages
	nodes []*yaml.Node // each stage
	lists [][]string   // each stage's: replica by replica, tensor-parallel rank within
}

// planOrder writes the stages' devices in the plan's order: replica,
// then stage, then tensor-parallel rank.
func (d stageDevices) planOrder(f *strategyFile, dp, tp int) (string, error) {
	for s, list := range d.lists {
		if len(list) != dp*tp {
			return "", f.errAt(d.nodes[s], fmt.Sprintf("stages[%d].devices", s), "%d devices; a stage runs on dp·tp = %d·%d", len(list), dp, tp)
		}
	}
	var out []string
	for r := range dp {
		for _, list := range d.lists {
			out = append(out, list[r*tp:(r+1)*tp]...)
		}
	}
	return strings.Join(out, "+"), nil
}
