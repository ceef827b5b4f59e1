package remote

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// DefaultJoinTimeout is how long the ranks wait for one another when
// Options.JoinTimeout is zero.
const DefaultJoinTimeout = 60 * time.Second

// MaxWorld is the most ranks a run may have: each rank keeps a connection
// and a stream slot for every other, allocated when it joins.
const MaxWorld = 1 << 16

// DefaultListen is a worker's peer address when Options.Listen is empty.
// It is reachable only from its own host: a run over several hosts sets
// Listen to an address the others can reach (":0" serves every interface,
// and the coordinator tells the others the address it saw the worker join
// from).
const DefaultListen = "127.0.0.1:0"

// Options says which rank of which run this process is.
type Options struct {
	Rank, World int
	// Master is where rank 0 listens, host:port (MASTER_ADDR:MASTER_PORT).
	Master string
	// Listen is where a worker serves the other ranks, host:port; the
	// coordinator serves them at Master. Empty means DefaultListen.
	Listen string
	// Token is the run's shared secret; every rank must have the same one.
	Token string
	// JoinTimeout bounds each stage of the setup: the workers' joining and
	// the opening of the mesh. Zero means DefaultJoinTimeout.
	JoinTimeout time.Duration
	// Hostname names this process's host, for Group.Clock: ranks with the
	// same Hostname share one wall clock. Empty means os.Hostname().
	Hostname string
}

// FromEnv returns the Options that the launcher's environment gives: Rank
// from RANK, World from WORLD_SIZE, Master from MASTER_ADDR and
// MASTER_PORT. The other fields are left for the caller.
func FromEnv() (Options, error) {
	var o Options
	var err error
	if o.World, err = envInt("WORLD_SIZE"); err != nil {
		return Options{}, err
	}
	if o.World < 1 {
		return Options{}, fmt.Errorf("remote: WORLD_SIZE=%d is not positive", o.World)
	}
	if o.World > MaxWorld {
		return Options{}, fmt.Errorf("remote: WORLD_SIZE=%d is more than the %d ranks a run may have", o.World, MaxWorld)
	}
	if o.Rank, err = envInt("RANK"); err != nil {
		return Options{}, err
	}
	if o.Rank < 0 || o.Rank >= o.World {
		return Options{}, fmt.Errorf("remote: RANK=%d is not in 0..WORLD_SIZE-1 (WORLD_SIZE=%d)", o.Rank, o.World)
	}
	host, err := envString("MASTER_ADDR")
	if err != nil {
		return Options{}, err
	}
	port, err := envInt("MASTER_PORT")
	if err != nil {
		return Options{}, err
	}
	if port < 1 || port > 65535 {
		return Options{}, fmt.Errorf("remote: MASTER_PORT=%d is not a port (1..65535)", port)
	}
	o.Master = net.JoinHostPort(host, strconv.Itoa(port))
	return o, nil
}

func envString(name string) (string, error) {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return "", fmt.Errorf("remote: %s is not set", name)
	}
	return v, nil
}

func envInt(name string) (int, error) {
	v, err := envString(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("remote: %s=%q is not an integer", name, v)
	}
	return n, nil
}

// check validates o and fills in the defaults.
func (o Options) check() (Options, error) {
	if o.World < 1 {
		return o, fmt.Errorf("remote: world size %d is not positive", o.World)
	}
	if o.World > MaxWorld {
		return o, fmt.Errorf("remote: world size %d is more than the %d ranks a run may have", o.World, MaxWorld)
	}
	if o.Rank < 0 || o.Rank >= o.World {
		return o, fmt.Errorf("remote: rank %d is not in 0..%d", o.Rank, o.World-1)
	}
	if o.Master == "" {
		return o, errors.New("remote: no master address")
	}
	if _, _, err := net.SplitHostPort(o.Master); err != nil {
		return o, fmt.Errorf("remote: master address %q: %w", o.Master, err)
	}
	if o.Token == "" {
		return o, errors.New("remote: empty token")
	}
	if o.JoinTimeout < 0 {
		return o, fmt.Errorf("remote: negative join timeout %v", o.JoinTimeout)
	}
	if o.JoinTimeout == 0 {
		o.JoinTimeout = DefaultJoinTimeout
	}
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.Hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			return o, fmt.Errorf("remote: hostname: %w", err)
		}
		o.Hostname = h
	}
	return o, nil
}
