package plans

import "io"

// indenter writes the compact JSON written to it to w indented, one space
// a level, byte for byte as json.Indent(dst, src, "", " ") would, as it
// streams through: Encode need not hold an indented copy of a plan of a
// hundred megabytes beside the compact one, and a switch per byte is
// quicker than json's scanner. It takes compact JSON only (what
// json.Marshal writes: no space outside strings), and a last newline.
type indenter struct {
	w          io.Writer
	buf        []byte // indented, not yet written to w
	depth      int
	needIndent bool // after { or [: a newline, unless it closes at once
	inString   bool
	escaped    bool // in a string, after a backslash
}

// indenterBuffer is how much an indenter holds before writing it out.
const indenterBuffer = 1 << 16

func newIndenter(w io.Writer) *indenter {
	return &indenter{w: w, buf: make([]byte, 0, 2*indenterBuffer)}
}

func (x *indenter) Write(b []byte) (int, error) {
	for _, c := range b {
		if x.inString {
			x.buf = append(x.buf, c)
			switch {
			case x.escaped:
				x.escaped = false
			case c == '\\':
				x.escaped = true
			case c == '"':
				x.inString = false
			}
			continue
		}
		if x.needIndent && c != '}' && c != ']' {
			x.needIndent = false
			x.depth++
			x.newline()
		}
		switch c {
		case '"':
			x.inString = true
			x.buf = append(x.buf, c)
		case '{', '[':
			x.needIndent = true
			x.buf = append(x.buf, c)
		case ',':
			x.buf = append(x.buf, c)
			x.newline()
		case ':':
			x.buf = append(x.buf, c, ' ')
		case '}', ']':
			if x.needIndent { // empty: {} or []
				x.needIndent = false
			} else {
				x.depth--
				x.newline()
			}
			x.buf = append(x.buf, c)
		default:
			x.buf = append(x.buf, c)
		}
		if len(x.buf) >= indenterBuffer {
			if err := x.Flush(); err != nil {
				return 0, err
			}
		}
	}
	return len(b), nil
}

func (x *indenter) newline() {
	x.buf = append(x.buf, '\n')
	for range x.depth {
		x.buf = append(x.buf, ' ')
	}
}

// Flush writes what the indenter holds to w.
func (x *indenter) Flush() error {
	_, err := x.w.Write(x.buf)
	x.buf = x.buf[:0]
	return err
}
