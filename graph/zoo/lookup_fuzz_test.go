package zoo

import (
	"os"
	"testing"
)

// A model name with size options never panics the parser, and what it
// accepts sets every size of the model (positive, or a valid choice).
func FuzzLookup(f *testing.F) {
	for _, s := range []string{"mnist-cnn", "mlp3x4096:width=64", "gpt2s-blocks:layers=2,hidden=64,heads=4,seq=16,norm=rms",
		"gpt2s-blocks:norm=layer", "mlp3x4096:", "mlp3x4096:width", "mnist-cnn:width=2", "gpt2s-blocks:layers=2,layers=3",
		"nosuch", "mlp3x4096:width=-1", "mlp3x4096: width = 8", "gpt:vocab=7,seq=4", "gpt3-175b:layers=2", "llama:attention=flash", "bert:attention=fast"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		b, sz, err := lookup(name)
		if err != nil {
			return
		}
		for _, o := range b.sizes {
			v, ok := sz[o.name]
			switch {
			case !ok:
				t.Fatalf("lookup(%q): size %s unset", name, o.name)
			case o.choices != nil && (v < 0 || v >= len(o.choices)):
				t.Fatalf("lookup(%q): %s = %d is not one of %d choices", name, o.name, v, len(o.choices))
			case o.choices == nil && v < 1:
				t.Fatalf("lookup(%q): %s = %d", name, o.name, v)
			}
		}
	})
}

// A Hugging Face config never panics the parser, and what it accepts is a
// zoo name whose sizes are valid or refused with an error.
func FuzzHFConfig(f *testing.F) {
	for _, file := range []string{"testdata/llama-2-7b.json", "testdata/llama-3-8b.json", "testdata/gpt2.json"} {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "")
		f.Add(data, "seq=128,layers=2")
	}
	f.Add([]byte(`{"model_type": "mistral", "sliding_window": 4096}`), "seq=4096")
	f.Add([]byte(`{"model_type": "gpt2", "n_layer": 1e300}`), "")
	f.Add([]byte(`{"model_type": null}`), "seq=x")
	f.Fuzz(func(t *testing.T, data []byte, opts string) {
		name, err := parseHFConfig("config.json", data, opts)
		if err != nil {
			return
		}
		b, sz, err := lookup(name)
		if err != nil {
			return
		}
		for _, o := range b.sizes {
			if v := sz[o.name]; o.choices == nil && v < 1 {
				t.Fatalf("%q → %q: %s = %d", data, name, o.name, v)
			}
		}
	})
}
