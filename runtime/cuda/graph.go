package cuda

import "errors"

// Graph is captured device work (CUgraph), from Stream.EndCapture.
type Graph struct {
	ctx *Context
	h   uintptr // CUgraph
}

func (g *Graph) enter() error {
	if g == nil || g.h == 0 {
		return errors.New("cuda: nil or destroyed graph")
	}
	return g.ctx.enter()
}

// Nodes returns the number of nodes in the graph.
func (g *Graph) Nodes() (int, error) {
	if err := g.enter(); err != nil {
		return 0, err
	}
	defer g.ctx.exit()
	var n uint64
	if r := cuGraphNodeCount(g.h, &n); r != cudaSuccess {
		return 0, driverError("cuGraphGetNodes", r)
	}
	return int(n), nil
}

// Instantiate makes an executable graph. The Graph may be destroyed
// afterwards; the GraphExec does not depend on it.
func (g *Graph) Instantiate() (*GraphExec, error) {
	if err := g.enter(); err != nil {
		return nil, err
	}
	defer g.ctx.exit()
	x := &GraphExec{ctx: g.ctx}
	if r := cuGraphInstantiateWithFlags(&x.h, g.h, graphInstantiateDef); r != cudaSuccess {
		return nil, driverError("cuGraphInstantiateWithFlags", r)
	}
	return x, nil
}

// Destroy releases the graph; it is a no-op the second time.
func (g *Graph) Destroy() error {
	if g == nil || g.h == 0 {
		return nil
	}
	if err := g.enter(); err != nil {
		return err
	}
	defer g.ctx.exit()
	if r := cuGraphDestroy(g.h); r != cudaSuccess {
		return driverError("cuGraphDestroy", r)
	}
	g.h = 0
	return nil
}

// GraphExec is an instantiated graph (CUgraphExec): launching it replays
// the captured work with one call.
type GraphExec struct {
	ctx *Context
	h   uintptr // CUgraphExec
}

func (x *GraphExec) enter() error {
	if x == nil || x.h == 0 {
		return errors.New("cuda: nil or destroyed graph exec")
	}
	return x.ctx.enter()
}

// Launch enqueues the whole graph on s. Launches of one GraphExec run in
// order even on different streams.
func (x *GraphExec) Launch(s *Stream) error {
	if err := x.enter(); err != nil {
		return err
	}
	defer x.ctx.exit()
	if s == nil || s.h == 0 {
		return argError("GraphExec.Launch", "nil or destroyed stream")
	}
	if r := cuGraphLaunch(x.h, s.h); r != cudaSuccess {
		return driverError("cuGraphLaunch", r)
	}
	return nil
}

// Destroy releases the executable graph; it is a no-op the second time.
func (x *GraphExec) Destroy() error {
	if x == nil || x.h == 0 {
		return nil
	}
	if err := x.enter(); err != nil {
		return err
	}
	defer x.ctx.exit()
	if r := cuGraphExecDestroy(x.h); r != cudaSuccess {
		return driverError("cuGraphExecDestroy", r)
	}
	x.h = 0
	return nil
}
