package topology

import (
	"errors"
	"fmt"
	"strings"
)

// Errors wrapped by the loader's *Error, for errors.Is.
var (
	ErrInvalid         = errors.New("topology: invalid cluster file")
	ErrUnknownEndpoint = errors.New("topology: unknown link endpoint")
	ErrDuplicateName   = errors.New("topology: duplicate name")
	ErrDisconnected    = errors.New("topology: disconnected device")
)

// Error is a problem in a cluster file, located by file, line and field
// path (e.g. "nodes[0].links[3].bandwidth").
type Error struct {
	File  string
	Line  int
	Field string
	Err   error
}

func (e *Error) Error() string {
	msg := strings.TrimPrefix(e.Err.Error(), "topology: ")
	if e.Field == "" {
		return fmt.Sprintf("topology: %s:%d: %s", e.File, e.Line, msg)
	}
	return fmt.Sprintf("topology: %s:%d: %s: %s", e.File, e.Line, e.Field, msg)
}

func (e *Error) Unwrap() error { return e.Err }

// detail is an error message that wraps a sentinel without repeating it.
type detail struct {
	sentinel error
	msg      string
}

func (d detail) Error() string { return d.msg }
func (d detail) Unwrap() error { return d.sentinel }

func detailf(sentinel error, format string, args ...any) error {
	return detail{sentinel, fmt.Sprintf(format, args...)}
}

// quantityError restates a Parse* error without its package prefix.
func quantityError(err error) error {
	return detail{ErrBadQuantity, strings.TrimPrefix(err.Error(), ErrBadQuantity.Error()+": ")}
}
