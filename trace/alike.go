package trace

import "fmt"

// Row is a row of a table about devices, as people read it: the device's
// name and the rest of the row, already formatted.
type Row struct {
	Device string
	Cells  string
}

// Alike returns rows with each run of consecutive rows whose cells read
// the same put into one row, named "first … last (n)". A plan's
// tensor-parallel ranks and its replicas often run and hold alike: a
// cluster's table then reads as a few rows, and no figure is lost (the
// JSON forms keep every device).
func Alike(rows []Row) []Row {
	var out []Row
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].Cells == rows[i].Cells {
			j++
		}
		r := rows[i]
		if j-i > 1 {
			r.Device = fmt.Sprintf("%s … %s (%d)", rows[i].Device, rows[j-1].Device, j-i)
		}
		out = append(out, r)
		i = j
	}
	return out
}
