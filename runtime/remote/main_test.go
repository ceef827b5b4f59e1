package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowkit/flowkit/runtime"
)

// The tests run real processes: TestMain re-executes the test binary as a
// worker when roleEnv is set. A worker joins the coordinator (the test
// process) and does what each Broadcast says (see act), replying with the
// result, until the coordinator closes the group.
const (
	roleEnv     = "FLOWKIT_REMOTE_ROLE"
	tokenEnv    = "FLOWKIT_REMOTE_TOKEN"
	hostnameEnv = "FLOWKIT_REMOTE_HOSTNAME"
)

// Exit codes of a worker process.
const (
	exitJoin   = 3 // Join failed
	exitClose  = 4 // Close failed
	exitFailed = 5 // the group failed, or a reply could not be sent
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "worker" {
		os.Exit(runWorker())
	}
	os.Exit(m.Run())
}

// runWorker is a worker process's life. After a failure it waits to be
// killed, so that its exit is not what the coordinator notices.
func runWorker() int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o, err := FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "JOIN:", err)
		return exitJoin
	}
	o.Token = os.Getenv(tokenEnv)
	o.Hostname = os.Getenv(hostnameEnv)
	o.JoinTimeout = 10 * time.Second
	g, err := Join(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "JOIN:", err)
		return exitJoin
	}
	for {
		kind, payload, err := g.Next(ctx)
		if errors.Is(err, io.EOF) {
			if err := g.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "CLOSE:", err)
				return exitClose
			}
			return 0
		}
		if err == nil {
			err = reply(g, kind, payload)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "FAILED:", err)
			<-ctx.Done()
			return exitFailed
		}
	}
}

// reply does what the coordinator asked and replies with the result.
func reply(g *Group, kind string, payload []byte) error {
	var s step
	if err := json.Unmarshal(payload, &s); err != nil {
		return g.ReplyError(err)
	}
	out, err := act(g, kind, s)
	if err != nil {
		return g.ReplyError(err)
	}
	return g.Reply(out)
}

// step is the argument of a command.
type step struct {
	Runs []int
	N    int // messages per run, sender and receiver
	Big  int // float32 values of each run's last message, when not 0
}

// act does command kind on g (each rank does the same).
//
//	send:    send N messages of each run in Runs to every other rank, the
//	         runs in parallel
//	recv:    receive, from every other rank, the N messages of each run
//	         and check them
//	queued:  the number of messages queued for Runs[0] and not yet read,
//	         once it is N or after a few seconds
//	forget:  forget each run
//	closed:  check that the Inbox of Runs[0] is closed
//	ping:    nothing
func act(g *Group, kind string, s step) ([]byte, error) {
	switch kind {
	case "send":
		return nil, sendAll(g, s)
	case "recv":
		for _, run := range s.Runs {
			if err := receiveAll(g, run, s); err != nil {
				return nil, err
			}
		}
		return nil, nil
	case "queued":
		// Sends may return before delivery: wait a little for N.
		n := g.inbox.queued(s.Runs[0])
		for deadline := time.Now().Add(5 * time.Second); n != s.N && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			n = g.inbox.queued(s.Runs[0])
		}
		return []byte(strconv.Itoa(n)), nil
	case "forget":
		for _, run := range s.Runs {
			g.Link().Forget(run)
		}
		return nil, nil
	case "closed":
		select {
		case m, ok := <-g.Link().Inbox(s.Runs[0]):
			if ok {
				return nil, fmt.Errorf("inbox of run %d: got a message from rank %d, want none", s.Runs[0], m.From)
			}
			return nil, nil
		case <-time.After(5 * time.Second):
			return nil, fmt.Errorf("inbox of run %d is not closed", s.Runs[0])
		}
	case "ping":
		return []byte("pong"), nil
	}
	return nil, fmt.Errorf("unknown command %q", kind)
}

// queued is the number of messages of run queued and not yet read.
func (in *inbox) queued(run int) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if q := in.runs[run]; q != nil {
		return len(q.pending)
	}
	return 0
}

// sendAll sends the messages of s to every other rank: one goroutine per
// destination and run, so that several send to one destination at once.
func sendAll(g *Group, s step) error {
	l := g.Link()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for to := range l.Size() {
		if to == l.Rank() {
			continue
		}
		for _, run := range s.Runs {
			wg.Go(func() {
				for i := range s.N {
					if err := l.Send(to, testMessage(l.Rank(), to, run, i, s)); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
				}
			})
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// receiveAll receives the messages of run from every other rank and checks
// them and their order.
func receiveAll(g *Group, run int, s step) error {
	l := g.Link()
	next := make([]int, l.Size())
	timeout := time.After(10 * time.Second)
	inbox := l.Inbox(run)
	for range s.N * (l.Size() - 1) {
		select {
		case m, ok := <-inbox:
			if !ok {
				return fmt.Errorf("run %d: inbox closed: %v", run, l.Err())
			}
			if m.From < 0 || m.From >= l.Size() || m.From == l.Rank() {
				return fmt.Errorf("run %d: message from rank %d", run, m.From)
			}
			if next[m.From] >= s.N {
				return fmt.Errorf("run %d: more than %d messages from rank %d", run, s.N, m.From)
			}
			if err := sameMessage(m, testMessage(m.From, l.Rank(), run, next[m.From], s)); err != nil {
				return fmt.Errorf("run %d, message %d from rank %d: %w", run, next[m.From], m.From, err)
			}
			next[m.From]++
		case <-timeout:
			return fmt.Errorf("run %d: got %v messages per rank, want %d each", run, next, s.N)
		}
	}
	return nil
}

// testMessage is the i-th message of run from rank from to rank to: kinds
// in turn, float and int payloads of various sizes, and every tenth with
// both payloads.
func testMessage(from, to, run, i int, s step) *runtime.Message {
	m := &runtime.Message{Run: run, From: from, Kind: runtime.MessageKind(i%4) + runtime.MsgDone, Firing: i, Iter: run, Reg: 100*from + to, Chunk: i % 5}
	nf, ni := 0, 0
	switch m.Kind {
	case runtime.MsgData:
		nf = 1 + i%7
	case runtime.MsgPart:
		ni = 1 + i%5
	case runtime.MsgReduced:
		nf = i % 3
	}
	if i%10 == 9 {
		nf, ni = 4096+i, 1000+i
	}
	if i == s.N-1 && s.Big > 0 {
		nf = s.Big
	}
	if nf > 0 {
		m.F = make([]float32, nf)
		for j := range m.F {
			m.F[j] = float32(from) + float32(to)/8 + float32(run)*1000 + float32(i*j%1021)/16
		}
	}
	if ni > 0 {
		m.I = make([]int32, ni)
		for j := range m.I {
			m.I[j] = int32(from<<24 | to<<16 | run<<8 | (i*j)&255)
		}
	}
	return m
}

// sameMessage says how got differs from want, nil when it does not.
func sameMessage(got, want *runtime.Message) error {
	if got.Run != want.Run || got.From != want.From || got.Kind != want.Kind || got.Firing != want.Firing || got.Iter != want.Iter || got.Reg != want.Reg || got.Chunk != want.Chunk {
		return fmt.Errorf("got %+v, want %+v (payloads aside)", *got, *want)
	}
	if err := sameWords("F", got.F, want.F); err != nil {
		return err
	}
	return sameWords("I", got.I, want.I)
}

func sameWords[T word](name string, got, want []T) error {
	if len(got) != len(want) || (got == nil) != (want == nil) {
		return fmt.Errorf("%s: got %d values (nil %t), want %d (nil %t)", name, len(got), got == nil, len(want), want == nil)
	}
	for j := range got {
		if got[j] != want[j] {
			return fmt.Errorf("%s[%d]: got %v, want %v", name, j, got[j], want[j])
		}
	}
	return nil
}

// cluster is the worker processes of a test run, and the test process as
// the coordinator.
type cluster struct {
	master  string
	token   string
	workers []*exec.Cmd // index rank; 0 is nil
	stderr  []*syncBuffer
	exited  []chan struct{} // closed when the worker's process has been waited for
}

// startWorkers starts ranks 1..world-1 as worker processes, joining the
// coordinator at master with token; env adds variables per rank. They are
// killed at the end of the test if they are still running.
func startWorkers(t *testing.T, world int, master, token string, env map[int][]string) *cluster {
	t.Helper()
	host, port, err := net.SplitHostPort(master)
	require.NoError(t, err)
	c := &cluster{master: master, token: token, workers: make([]*exec.Cmd, world),
		stderr: make([]*syncBuffer, world), exited: make([]chan struct{}, world)}
	for r := 1; r < world; r++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), roleEnv+"=worker", "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world),
			"MASTER_ADDR="+host, "MASTER_PORT="+port, tokenEnv+"="+token)
		cmd.Env = append(cmd.Env, env[r]...)
		c.stderr[r] = &syncBuffer{}
		cmd.Stdout = c.stderr[r]
		cmd.Stderr = c.stderr[r]
		require.NoError(t, cmd.Start())
		c.workers[r] = cmd
		c.exited[r] = make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(c.exited[r])
		}()
	}
	t.Cleanup(func() {
		for r := 1; r < world; r++ {
			_ = c.workers[r].Process.Kill()
			<-c.exited[r]
		}
	})
	return c
}

// wait waits for rank r's process to exit and returns its exit code.
func (c *cluster) wait(t *testing.T, r int, within time.Duration) int {
	t.Helper()
	select {
	case <-c.exited[r]:
	case <-time.After(within):
		t.Fatalf("rank %d still runs after %v; its output:\n%s", r, within, c.stderr[r])
	}
	return c.workers[r].ProcessState.ExitCode()
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// syncBuffer is a bytes.Buffer safe for a process's output and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
