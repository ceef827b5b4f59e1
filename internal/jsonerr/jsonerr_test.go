package jsonerr

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

type inner struct {
	Size int `json:"size"`
}

type header struct {
	Model string `json:"model"`
}

type doc struct {
	header
	Batch  int              `json:"batch"`
	Rate   float64          `json:"rate"`
	Seed   uint64           `json:"seed"`
	Shape  []int            `json:"shape"`
	Inner  inner            `json:"inner"`
	Ptr    *inner           `json:"ptr"`
	ByName map[string]inner `json:"by_name"`
	On     bool             `json:"on"`
}

func decode(data string) error {
	dec := json.NewDecoder(bytes.NewReader([]byte(data)))
	dec.DisallowUnknownFields()
	var d doc
	return Locate([]byte(data), dec.Decode(&d))
}

// Each error names the line and column of what is wrong, and what was
// wanted in JSON's words.
func TestLocate(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{`{"model": 5}`, `line 1, column 11: model: a JSON number where a string is wanted`},
		{"{\n  \"batch\": [1, 2],\n  \"rate\": 1\n}", `line 2, column 12: batch: a JSON array where an integer is wanted`},
		{"{\n  \"batch\": \"sixty\"\n}", `line 2, column 12: batch: a JSON string where an integer is wanted`},
		{"{\"rate\": true}", `line 1, column 10: rate: a JSON bool where a number is wanted`},
		{"{\"seed\": -1}", `line 1, column 10: seed: a JSON number -1 where an integer ≥ 0 is wanted`},
		{"{\"batch\": 1.5}", `line 1, column 11: batch: a JSON number 1.5 where an integer is wanted`},
		{"{\"inner\": {\"size\": {}}}", `line 1, column 20: size: a JSON object where an integer is wanted`},
		{"{\"ptr\": {\"size\": \"x\"}}", `line 1, column 18: size: a JSON string where an integer is wanted`},
		{"{\"shape\": {\"a\": 1}}", `line 1, column 11: shape: a JSON object where an array is wanted`},
		{"{\"on\": 1}", `line 1, column 8: on: a JSON number where a boolean is wanted`},
		{"{\n  \"model\": \"mlp\"\n  \"batch\": 1\n}", `line 3, column 3: invalid character '"' after object key:value pair`},
		{"{\n  \"batch\": 1,\n  \"inner\": {\"size\": 1, \"colour\": 2}\n}", `line 3, column 24: unknown field "colour"`},
		{"{\"by_name\": {\"size\": {\"size\": 1, \"batch\": 2}}}", `line 1, column 34: unknown field "batch"`},
		{"{\n  \"batch\": 1,\n  \"rate\"", `line 3, column 9: the document ends before its value does (truncated JSON)`},
	} {
		err := decode(tt.doc)
		require.EqualError(t, err, tt.want, tt.doc)
		var e *Error
		require.ErrorAs(t, err, &e)
		require.NotNil(t, errors.Unwrap(err))
	}
	require.NoError(t, decode(`{"model": "mlp", "batch": 2}`))
	other := errors.New("disk on fire")
	require.Equal(t, other, Locate(nil, other))
	var e *Error
	require.ErrorAs(t, Locate([]byte(""), io.EOF), &e)
	require.Equal(t, 1, e.Line)
}

// Any bytes locate without a panic, at a position inside the document.
func FuzzLocate(f *testing.F) {
	f.Add(`{"model": 5}`)
	f.Add("{\n\"inner\": {\"size\": 1, \"x\": [1]}}")
	f.Add(`{"batch": "\"x\""}`)
	f.Fuzz(func(t *testing.T, data string) {
		err := decode(data)
		var e *Error
		if errors.As(err, &e) && e.Line > 0 {
			require.LessOrEqual(t, e.Line, 1+bytes.Count([]byte(data), []byte("\n")))
			require.GreaterOrEqual(t, e.Column, 1)
		}
	})
}
