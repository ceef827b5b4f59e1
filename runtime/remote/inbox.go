package remote

import (
	"sync"

	"github.com/flowkit/flowkit/runtime"
)

// inbox holds the messages received, a queue per run. Putting a message in
// never blocks, whatever the reader does: a receiving stream that waited
// for its reader could wait for a rank that waits for this one.
type inbox struct {
	mu        sync.Mutex
	runs      map[int]*runQueue
	forgotten runSet
	shut      bool // failed or closed: every channel is closed, nothing more is kept
}

// runQueue is the messages of one run not yet read.
type runQueue struct {
	pending []*runtime.Message
	out     chan *runtime.Message // nil until Inbox is called for the run
	wake    chan struct{}         // a message was added (capacity 1)
	stop    chan struct{}         // closed when the run is forgotten or the inbox shut
}

func newInbox() *inbox {
	return &inbox{runs: make(map[int]*runQueue), forgotten: runSet{above: make(map[int]struct{})}}
}

// put queues m for its run, unless the run was forgotten.
func (in *inbox) put(m *runtime.Message) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.shut || in.forgotten.has(m.Run) {
		return
	}
	q := in.queue(m.Run)
	q.pending = append(q.pending, m)
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// queue returns run's queue, making it if need be. Call with mu held.
func (in *inbox) queue(run int) *runQueue {
	q := in.runs[run]
	if q == nil {
		q = &runQueue{wake: make(chan struct{}, 1), stop: make(chan struct{})}
		in.runs[run] = q
	}
	return q
}

// open returns the channel of run's messages; it is closed when the run is
// forgotten or the inbox shut, at once if it already was.
func (in *inbox) open(run int) <-chan *runtime.Message {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.shut || in.forgotten.has(run) {
		c := make(chan *runtime.Message)
		close(c)
		return c
	}
	q := in.queue(run)
	if q.out == nil {
		q.out = make(chan *runtime.Message)
		go in.pump(q)
	}
	return q.out
}

// pump moves q's messages to its channel, one at a time, as they are read.
func (in *inbox) pump(q *runQueue) {
	defer close(q.out)
	for {
		in.mu.Lock()
		select {
		case <-q.stop:
			in.mu.Unlock()
			return
		default:
		}
		if len(q.pending) == 0 {
			in.mu.Unlock()
			select {
			case <-q.wake:
				continue
			case <-q.stop:
				return
			}
		}
		m := q.pending[0]
		q.pending[0] = nil
		q.pending = q.pending[1:]
		in.mu.Unlock()
		select {
		case q.out <- m:
		case <-q.stop:
			return
		}
	}
}

// forget drops run's messages, queued and to come, and closes its channel.
func (in *inbox) forget(run int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if q := in.runs[run]; q != nil {
		close(q.stop)
		delete(in.runs, run)
	}
	in.forgotten.add(run)
}

// shutdown drops every message and closes every channel, for good.
func (in *inbox) shutdown() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.shut {
		return
	}
	in.shut = true
	for run, q := range in.runs {
		close(q.stop)
		delete(in.runs, run)
	}
}

// runSet is a set of runs (≥ 0) that stays small when runs are added
// roughly in order, as runners forget them: every run below below is in
// the set, and above holds the others.
type runSet struct {
	below int
	above map[int]struct{}
}

func (s *runSet) has(run int) bool {
	if run < s.below {
		return true
	}
	_, ok := s.above[run]
	return ok
}

func (s *runSet) add(run int) {
	if s.has(run) {
		return
	}
	s.above[run] = struct{}{}
	for {
		if _, ok := s.above[s.below]; !ok {
			return
		}
		delete(s.above, s.below)
		s.below++
	}
}
