package progress

import "testing"

// Under go test stderr is not a terminal: a bar shows nothing, and setting
// or finishing it, of any total, is harmless.
func TestQuietOffTerminal(t *testing.T) {
	for _, total := range []int{-1, 0, 3} {
		b := New(total, "work")
		if b.bar != nil {
			t.Fatalf("New(%d): a bar drawn on a stderr that is not a terminal", total)
		}
		b.Set(2)
		b.Set(3)
		b.Finish()
	}
}
