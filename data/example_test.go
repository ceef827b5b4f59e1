package data_test

import (
	"fmt"
	"log"

	"github.com/flowkit/flowkit/data"
)

func ExampleLoadMNIST() {
	dir, err := data.LocateMNIST("") // "" unless the user passed --data DIR
	if err != nil {
		log.Fatal(err)
	}
	train, test, err := data.LoadMNIST(dir)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(train.N, test.N, train.Rows, train.Cols)
}

func ExampleLoader() {
	// Five 1×2 images labelled 0 to 4.
	ds := &data.Dataset{
		Images: []uint8{0, 255, 0, 255, 0, 255, 0, 255, 0, 255},
		Labels: []uint8{0, 1, 2, 3, 4},
		N:      5, Rows: 1, Cols: 2,
	}
	const batch = 2
	l := data.NewLoader(ds, batch, false, 1)
	l.DropLast = true
	x := make([]float32, batch*ds.Rows*ds.Cols)
	y := make([]int32, batch)
	fmt.Println("steps per epoch:", l.Steps())
	for {
		n, ok := l.Next(x, y)
		if !ok {
			break
		}
		fmt.Printf("labels %v, pixels %.3f\n", y[:n], x[:n*ds.Rows*ds.Cols])
	}
	// Output:
	// steps per epoch: 2
	// labels [0 1], pixels [-0.424 2.821 -0.424 2.821]
	// labels [2 3], pixels [-0.424 2.821 -0.424 2.821]
}
