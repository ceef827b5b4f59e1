package zoo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// A model may be given as a Hugging Face config.json: a name whose base
// ends in ".json" is such a file, "path/config.json" or, with size
// options that override the file's, "path/config.json:seq=2048". Resolve
// maps it onto the zoo: model_type llama or mistral (LlamaForCausalLM,
// MistralForCausalLM) onto llama, gpt2 onto gpt, bert (BertForMaskedLM)
// onto bert. The file is read where
// the name is resolved; commands resolve a --model once, so that a plan
// records the zoo name, not a path another machine may not have.

// splitConfig splits a config-file model name into the file's path and
// the size options after it; ok is false for a zoo name.
func splitConfig(name string) (path, opts string, ok bool) {
	i := strings.Index(name, ".json")
	if i < 0 {
		return "", "", false
	}
	path, rest := name[:i+len(".json")], name[i+len(".json"):]
	switch {
	case rest == "":
		return path, "", true
	case rest[0] == ':':
		return path, rest[1:], true
	}
	return "", "", false
}

// isConfigFile reports whether a model name is a config file's.
func isConfigFile(name string) bool {
	_, _, ok := splitConfig(name)
	return ok
}

// Resolve returns the zoo name of a model name: a config file's (see
// above) translated, with its size options applied; any other name as it
// is.
func Resolve(name string) (string, error) {
	path, opts, ok := splitConfig(name)
	if !ok {
		return name, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("zoo: model config: %w", err)
	}
	canonical, err := parseHFConfig(path, data, opts)
	if err != nil {
		return "", err
	}
	// Sizes that do not fit together (heads that do not divide the hidden
	// size) are the file's error: said with its name, not only the zoo
	// name it maps to.
	if _, _, err := lookup(canonical); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return canonical, nil
}

// hfFields are a config's top-level fields, decoded as needed.
type hfFields struct {
	file string
	m    map[string]json.RawMessage
}

// errMissing marks a required field the config lacks.
var errMissing = errors.New("missing")

func (f hfFields) errorf(field, format string, args ...any) error {
	return fmt.Errorf("zoo: %s: field %s: %s", f.file, field, fmt.Sprintf(format, args...))
}

// present reports whether the config sets field to something other than
// null.
func (f hfFields) present(field string) bool {
	v, ok := f.m[field]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

// number returns a numeric field; errMissing (wrapped) if absent or null.
func (f hfFields) number(field string) (float64, error) {
	if !f.present(field) {
		return 0, fmt.Errorf("zoo: %s: field %s: %w (required for model_type %s)", f.file, field, errMissing, f.modelType())
	}
	var v float64
	if err := json.Unmarshal(f.m[field], &v); err != nil {
		return 0, f.errorf(field, "want a number, got %s", f.m[field])
	}
	return v, nil
}

// positive returns a field that must be a positive integer (which JSON
// may write as 500000.0).
func (f hfFields) positive(field string) (int, error) {
	v, err := f.number(field)
	if err != nil {
		return 0, err
	}
	if v < 1 || v != math.Trunc(v) || v > math.MaxInt32 {
		return 0, f.errorf(field, "want a positive integer, got %s", f.m[field])
	}
	return int(v), nil
}

// positiveOr is positive, or def where the field is absent or null.
func (f hfFields) positiveOr(field string, def int) (int, error) {
	if !f.present(field) {
		return def, nil
	}
	return f.positive(field)
}

// str returns a string field, "" where absent or null.
func (f hfFields) str(field string) (string, error) {
	if !f.present(field) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(f.m[field], &s); err != nil {
		return "", f.errorf(field, "want a string, got %s", f.m[field])
	}
	return s, nil
}

// flag returns a boolean field, false where absent or null.
func (f hfFields) flag(field string) (bool, error) {
	if !f.present(field) {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(f.m[field], &b); err != nil {
		return false, f.errorf(field, "want true or false, got %s", f.m[field])
	}
	return b, nil
}

// fourTimes refuses an MLP width field other than 4·hidden (the hidden
// size's field is hiddenField), where the config gives it.
func (f hfFields) fourTimes(field, hiddenField string, hidden int) error {
	if !f.present(field) {
		return nil
	}
	inner, err := f.positive(field)
	if err != nil {
		return err
	}
	if inner != 4*hidden {
		return f.errorf(field, "%d is not 4·%s = %d: not supported", inner, hiddenField, 4*hidden)
	}
	return nil
}

func (f hfFields) modelType() string {
	s, _ := f.str("model_type")
	return s
}

// parseHFConfig translates the config data of file (with the size options
// opts applied over it) into a zoo name.
func parseHFConfig(file string, data []byte, opts string) (string, error) {
	f := hfFields{file: file}
	if err := json.Unmarshal(data, &f.m); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			line := 1 + bytes.Count(data[:min(int(syn.Offset), len(data))], []byte("\n"))
			return "", fmt.Errorf("zoo: %s:%d: %v", file, line, err)
		}
		return "", fmt.Errorf("zoo: %s: want a JSON object of fields: %v", file, err)
	}
	if f.m == nil {
		return "", fmt.Errorf("zoo: %s: want a JSON object of fields, got null", file)
	}
	override := map[string]string{}
	if opts != "" {
		for _, kv := range strings.Split(opts, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
			override[k] = v
		}
	}
	mt, err := f.str("model_type")
	if err != nil {
		return "", err
	}
	var base string
	var sizes [][2]string
	switch mt {
	case "llama", "mistral":
		base, sizes, err = llamaConfig(f, override)
	case "gpt2":
		base, sizes, err = gpt2Config(f, override)
	case "bert":
		base, sizes, err = bertConfig(f, override)
	case "":
		return "", fmt.Errorf("zoo: %s: field model_type: %w (want %s)", file, errMissing, hfModelTypes)
	default:
		return "", f.errorf("model_type", "%q is not supported (want %s)", mt, hfModelTypes)
	}
	if err != nil {
		return "", err
	}
	var parts []string
	for _, s := range sizes {
		if _, ok := override[s[0]]; !ok {
			parts = append(parts, s[0]+"="+s[1])
		}
	}
	if opts != "" {
		parts = append(parts, opts)
	}
	return base + ":" + strings.Join(parts, ","), nil
}

// hfModelTypes are the model types a config may have.
const hfModelTypes = "llama, mistral, gpt2 or bert"

// fieldSizes reads the size options mapped from required fields, in
// order, into sizes and returns their values with the overrides applied.
// A field whose option is overridden need not be in the file.
func fieldSizes(f hfFields, override map[string]string, fields [][2]string) ([][2]string, map[string]int, error) {
	var sizes [][2]string
	vals := map[string]int{}
	for _, m := range fields {
		option, field := m[0], m[1]
		if o, ok := override[option]; ok {
			v, err := strconv.Atoi(o)
			if err != nil || v < 1 {
				return nil, nil, fmt.Errorf("zoo: %s: size option %s must be a positive integer, got %q", f.file, option, o)
			}
			vals[option] = v
			if !f.present(field) {
				continue
			}
		}
		v, err := f.positive(field)
		if err != nil {
			return nil, nil, err
		}
		sizes = append(sizes, [2]string{option, strconv.Itoa(v)})
		if _, ok := vals[option]; !ok {
			vals[option] = v
		}
	}
	return sizes, vals, nil
}

// llamaConfig maps LlamaConfig's (and MistralConfig's) fields onto llama's
// size options; it refuses what llama does not build (biases, scaled
// RoPE, an activation other than SiLU, sliding windows shorter than the
// sequence).
func llamaConfig(f hfFields, override map[string]string) (string, [][2]string, error) {
	sizes, vals, err := fieldSizes(f, override, [][2]string{
		{"layers", "num_hidden_layers"}, {"hidden", "hidden_size"}, {"heads", "num_attention_heads"},
		{"ffn", "intermediate_size"}, {"seq", "max_position_embeddings"}, {"vocab", "vocab_size"},
	})
	if err != nil {
		return "", nil, err
	}
	heads := vals["heads"]
	kv, err := f.positiveOr("num_key_value_heads", heads) // LlamaConfig's default: multi-head attention
	if err != nil {
		return "", nil, err
	}
	sizes = append(sizes, [2]string{"kv_heads", strconv.Itoa(kv)})
	theta, err := f.positiveOr("rope_theta", 10000)
	if err != nil {
		return "", nil, err
	}
	sizes = append(sizes, [2]string{"theta", strconv.Itoa(theta)})
	eps := 1e-6 // LlamaConfig's default
	if f.present("rms_norm_eps") {
		if eps, err = f.number("rms_norm_eps"); err != nil {
			return "", nil, err
		}
	}
	i := slices.IndexFunc(llamaEps, func(s string) bool {
		e, _ := strconv.ParseFloat(s, 64)
		return math.Abs(eps-e) <= 1e-3*e
	})
	if i < 0 {
		return "", nil, f.errorf("rms_norm_eps", "%g is not supported (want %s)", eps, strings.Join(llamaEps, " or "))
	}
	sizes = append(sizes, [2]string{"eps", llamaEps[i]})
	if act, err := f.str("hidden_act"); err != nil {
		return "", nil, err
	} else if act != "" && act != "silu" {
		return "", nil, f.errorf("hidden_act", "%q is not supported (llama's MLP is SwiGLU: silu)", act)
	}
	for _, field := range []string{"attention_bias", "mlp_bias"} {
		if b, err := f.flag(field); err != nil {
			return "", nil, err
		} else if b {
			return "", nil, f.errorf(field, "true is not supported: llama's projections have no biases")
		}
	}
	if sizes, err = tieSize(f, sizes, false); err != nil { // LlamaConfig's default: untied
		return "", nil, err
	}
	if f.present("rope_scaling") {
		return "", nil, f.errorf("rope_scaling", "scaled rotary embeddings are not supported (set it to null to model the unscaled ones)")
	}
	if f.present("head_dim") {
		hd, err := f.positive("head_dim")
		if err != nil {
			return "", nil, err
		}
		if hidden := vals["hidden"]; hd*heads != hidden {
			return "", nil, f.errorf("head_dim", "%d is not hidden_size/num_attention_heads = %d/%d: not supported", hd, hidden, heads)
		}
	}
	if f.present("sliding_window") {
		w, err := f.positive("sliding_window")
		if err != nil {
			return "", nil, err
		}
		if seq := vals["seq"]; w < seq {
			return "", nil, f.errorf("sliding_window", "%d is shorter than the sequence (%d): sliding-window attention is not supported; give a sequence within the window (config.json:seq=%d)", w, seq, w)
		}
	}
	return "llama", sizes, nil
}

// tieSize adds tie=on to sizes where the config ties the head to the token
// embedding (tie_word_embeddings; def where absent, as the config class's
// default).
func tieSize(f hfFields, sizes [][2]string, def bool) ([][2]string, error) {
	tied := def
	if f.present("tie_word_embeddings") {
		var err error
		if tied, err = f.flag("tie_word_embeddings"); err != nil {
			return nil, err
		}
	}
	if tied {
		sizes = append(sizes, [2]string{"tie", "on"})
	}
	return sizes, nil
}

// gpt2Config maps GPT2Config's fields onto gpt's size options. The GPT's
// GELU is the exact one where GPT-2's gelu_new is its tanh approximation;
// its head is tied to the token embedding unless tie_word_embeddings is
// false (GPT2Config's default ties them).
func gpt2Config(f hfFields, override map[string]string) (string, [][2]string, error) {
	sizes, vals, err := fieldSizes(f, override, [][2]string{
		{"layers", "n_layer"}, {"hidden", "n_embd"}, {"heads", "n_head"}, {"seq", "n_positions"}, {"vocab", "vocab_size"},
	})
	if err != nil {
		return "", nil, err
	}
	if err := f.fourTimes("n_inner", "n_embd", vals["hidden"]); err != nil {
		return "", nil, err
	}
	if act, err := f.str("activation_function"); err != nil {
		return "", nil, err
	} else if act != "" && !strings.HasPrefix(act, "gelu") {
		return "", nil, f.errorf("activation_function", "%q is not supported (the GPT's MLP uses GELU)", act)
	}
	if sizes, err = tieSize(f, sizes, true); err != nil {
		return "", nil, err
	}
	return "gpt", sizes, nil
}

// bertConfig maps BertConfig's fields onto bert's size options; it refuses
// what bert does not build (an MLP width other than 4·hidden, an
// activation other than GELU, other layer-norm epsilons, relative
// position embeddings, a decoder). Its head is tied to the token
// embedding unless tie_word_embeddings is false, as BertConfig's default
// ties them. Whatever type_vocab_size says, bert builds one token type
// (see buildBERT).
func bertConfig(f hfFields, override map[string]string) (string, [][2]string, error) {
	sizes, vals, err := fieldSizes(f, override, [][2]string{
		{"layers", "num_hidden_layers"}, {"hidden", "hidden_size"}, {"heads", "num_attention_heads"},
		{"seq", "max_position_embeddings"}, {"vocab", "vocab_size"},
	})
	if err != nil {
		return "", nil, err
	}
	if err := f.fourTimes("intermediate_size", "hidden_size", vals["hidden"]); err != nil {
		return "", nil, err
	}
	if act, err := f.str("hidden_act"); err != nil {
		return "", nil, err
	} else if act != "" && act != "gelu" {
		return "", nil, f.errorf("hidden_act", "%q is not supported (bert's MLP uses the exact GELU, gelu)", act)
	}
	if f.present("layer_norm_eps") {
		eps, err := f.number("layer_norm_eps")
		if err != nil {
			return "", nil, err
		}
		if math.Abs(eps-bertEps) > 1e-3*bertEps {
			return "", nil, f.errorf("layer_norm_eps", "%g is not supported (bert's layer norms use 1e-12)", eps)
		}
	}
	if pe, err := f.str("position_embedding_type"); err != nil {
		return "", nil, err
	} else if pe != "" && pe != "absolute" {
		return "", nil, f.errorf("position_embedding_type", "%q is not supported (bert's position embeddings are absolute)", pe)
	}
	if dec, err := f.flag("is_decoder"); err != nil {
		return "", nil, err
	} else if dec {
		return "", nil, f.errorf("is_decoder", "true is not supported: bert is an encoder, its attention bidirectional")
	}
	if sizes, err = tieSize(f, sizes, true); err != nil {
		return "", nil, err
	}
	return "bert", sizes, nil
}
