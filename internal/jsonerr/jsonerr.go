// Package jsonerr says where in a JSON file encoding/json failed, by line
// and column, and what it wanted there in JSON's words rather than Go's:
// "batch: a JSON array where a number is wanted", not "cannot unmarshal
// array into Go struct field file.header.batch of type int".
package jsonerr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// Error is a decoding error of a JSON document, located.
type Error struct {
	Line, Column int // 1-based; 0 when unknown
	Msg          string
	Err          error // encoding/json's
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Locate turns err, from decoding data with encoding/json, into an *Error
// that says where and what. A syntax error is located at its offset, a
// value of the wrong type at the value, an unknown field (a decoder with
// DisallowUnknownFields) at the first key of that name, and a document
// cut short at its end. Other errors are returned as they are, and nil
// as nil.
func Locate(data []byte, err error) error {
	if err == nil {
		return nil
	}
	var (
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
		off int64 = -1
		msg string
	)
	switch {
	case errors.As(err, &se):
		off, msg = max(se.Offset-1, 0), strings.TrimPrefix(se.Error(), "json: ") // the offending byte
	case errors.As(err, &te):
		off = valueStart(data, te.Offset)
		msg = fmt.Sprintf("a JSON %s where %s is wanted", te.Value, jsonKind(te.Type))
		if te.Field != "" {
			msg = field(te.Field) + ": " + msg
		}
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		off, msg = int64(len(data)), "the document ends before its value does (truncated JSON)"
	case strings.HasPrefix(err.Error(), `json: unknown field "`):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		off, msg = keyOffset(data, name), fmt.Sprintf("unknown field %q", name)
	default:
		return err
	}
	e := &Error{Msg: msg, Err: err}
	if off >= 0 {
		e.Line, e.Column = position(data, off)
	}
	return e
}

// field is a Go field path in the JSON document's terms: embedded
// structs' names dropped ("header.batch" is "batch" where header is
// embedded without a JSON name), which the Go path cannot tell apart, so
// only the last element is kept.
func field(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// jsonKind names what a Go type takes in JSON.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer ≥ 0"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "a " + t.String()
}

// valueStart moves back from off, where encoding/json reports a value of
// the wrong type (just after it, or at its start), to the value's start:
// past whitespace, and to the start of a string, number or literal that
// ends there.
func valueStart(data []byte, off int64) int64 {
	i := min(int(off), len(data))
	for i > 0 && isSpace(data[i-1]) {
		i--
	}
	if i > 0 && (data[i-1] == '[' || data[i-1] == '{') { // an array or object, reported just inside
		return int64(i - 1)
	}
	if i > 0 && data[i-1] == '"' { // a string that ends here
		for j := i - 2; j >= 0; j-- {
			if data[j] == '"' && (j == 0 || data[j-1] != '\\') {
				return int64(j)
			}
		}
	}
	j := i
	for j > 0 && strings.IndexByte("0123456789+-.eEtrufalsn", data[j-1]) >= 0 {
		j--
	}
	if j < i {
		return int64(j)
	}
	return int64(i)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// keyOffset is the offset of the first object key name in data, −1 if
// none.
func keyOffset(data []byte, name string) int64 {
	type container struct{ object, wantKey bool }
	dec := json.NewDecoder(bytes.NewReader(data))
	var stack []container
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return -1
		}
		var top *container
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if top != nil && top.object {
				top.wantKey = true // after this value, the next key
			}
			stack = append(stack, container{object: tok == json.Delim('{'), wantKey: true})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			continue
		}
		if top == nil || !top.object {
			continue
		}
		if top.wantKey {
			if s, _ := tok.(string); s == name {
				// The token begins at its quote, after the separator
				// and the whitespace before it.
				return int64(bytes.IndexByte(data[start:], '"')) + start
			}
		}
		top.wantKey = !top.wantKey
	}
}

// position is the 1-based line and column (in bytes) of offset off.
func position(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line = 1 + bytes.Count(before, []byte("\n"))
	return line, int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
}
