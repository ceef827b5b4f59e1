package trace

import (
	"encoding/csv"
	"io"
	"strconv"
)

// csvHeader names WriteCSV's columns.
var csvHeader = []string{
	"task", "name", "kind", "op", "phase", "device", "stream",
	"iter", "micro", "start_ns", "end_ns", "dur_ns",
}

// WriteCSV writes t as CSV with a header row and one row per event, in the
// trace's order. A task that occupies several streams is listed on its home
// stream (its first).
func WriteCSV(w io.Writer, t *Trace) error {
	if err := t.Validate(); err != nil {
		return err
	}
	cw := csv.NewWriter(w)
	cw.Write(csvHeader)
	row := make([]string, len(csvHeader))
	for _, e := range t.Events {
		task := &t.Tasks[e.Task]
		home := task.Streams[0]
		row = append(row[:0],
			strconv.Itoa(int(e.Task)), task.Name, task.Kind, task.Op, task.Phase,
			t.Devices[home.Device], t.Streams[home.Device][home.Stream],
			strconv.Itoa(int(e.Iter)), strconv.Itoa(int(e.Micro)),
			strconv.FormatInt(int64(e.Start), 10), strconv.FormatInt(int64(e.End), 10),
			strconv.FormatInt(int64(e.Dur()), 10),
		)
		cw.Write(row)
	}
	cw.Flush()
	return cw.Error()
}
