package cpu

// The ReLU rows of BiasAct and BiasActBackward: y = relu(x + b) and dx = dy
// where x + b > 0, else +0, along a row, with b one value for the row
// (a channel's bias in NCHW) or one per element (a dense layer's). x + b is
// rounded to float32 first. They are most of what a convolutional
// network's step spends outside its convolutions, so they have vector
// forms: reluRowsDefault is the fastest this CPU runs, the others stay for
// reference and tests.
type reluRows struct {
	name   string
	fwd    func(x []float32, b float32, y []float32)
	fwdVec func(x, b, y []float32)
	bwd    func(x []float32, b float32, dy, dx []float32)
	bwdVec func(x, b, dy, dx []float32)
}

// reluRowsGo is the reference, plain Go.
var reluRowsGo = reluRows{"go", addReLUGo, addReLUVecGo, addReLUGradGo, addReLUGradVecGo}

// reluRowsDefault is what BiasAct and BiasActBackward use.
var reluRowsDefault = reluRowsImpls[len(reluRowsImpls)-1]

func addReLUGo(x []float32, b float32, y []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] = relu(x[i] + b)
	}
}

func addReLUVecGo(x, b, y []float32) {
	x, b = x[:len(y)], b[:len(y)]
	for i := range y {
		y[i] = relu(x[i] + b[i])
	}
}

func addReLUGradGo(x []float32, b float32, dy, dx []float32) {
	x, dy = x[:len(dx)], dy[:len(dx)]
	for i := range dx {
		dx[i] = reluGrad(x[i]+b, dy[i])
	}
}

func addReLUGradVecGo(x, b, dy, dx []float32) {
	x, b, dy = x[:len(dx)], b[:len(dx)], dy[:len(dx)]
	for i := range dx {
		dx[i] = reluGrad(x[i]+b[i], dy[i])
	}
}
