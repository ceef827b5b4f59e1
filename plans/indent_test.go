package plans

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/flowkit/flowkit/graph"
)

// The indenter writes what json.Indent does, whatever the pieces the
// compact JSON comes in.
func TestIndenterIsJSONIndent(t *testing.T) {
	for _, src := range []string{
		`{}`, `[]`, `{"a":[],"b":{},"c":[{}],"d":[[]]}`,
		`{"s":"{[,:]}\"\\\"","n":-1.5e3,"t":true,"z":null,"e":[1,2,{"x":"\u0026"}]}`,
		`"top"`, `[1,[2,[3]],{"k":{"k":"v"}}]`,
	} {
		for _, piece := range []int{1, 2, 5, len(src) + 1} {
			var want, got bytes.Buffer
			if err := json.Indent(&want, []byte(src+"\n"), "", " "); err != nil {
				t.Fatal(err)
			}
			x := newIndenter(&got)
			for b := []byte(src + "\n"); len(b) > 0; {
				n := min(piece, len(b))
				if _, err := x.Write(b[:n]); err != nil {
					t.Fatal(err)
				}
				b = b[n:]
			}
			if err := x.Flush(); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Errorf("%s in pieces of %d: got %q, want %q", src, piece, got.String(), want.String())
			}
		}
	}
}

// Encode writes what json's Encoder does with SetIndent("", " "): plan
// files stay as they were.
func TestEncodeIsEncoderIndent(t *testing.T) {
	st, err := ParseStrategy("pp=2,mb=4,recompute=full", 8)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(Config{Model: "gpt:layers=2,hidden=32,heads=2,seq=8,vocab=64", Batch: 8, Strategy: st,
		Optimizer: graph.Adam{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, Devices: devs(2, 0)})
	if err != nil {
		t.Fatal(err)
	}
	var got, want bytes.Buffer
	if err := Encode(&got, p); err != nil {
		t.Fatal(err)
	}
	f, err := p.toFile()
	if err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(&want)
	enc.SetIndent("", " ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("got %d bytes, want %d: Encode differs from json.Encoder's indentation", got.Len(), want.Len())
	}
}
