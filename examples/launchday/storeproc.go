package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/examples/store"
)

// The store runs in a process of its own: this program, started again with
// -serve-store. In the demo's process it would share Go's scheduler with the
// load generator, whose thousands of goroutines (one per buyer's request)
// are runnable at once in the launch's first second: a buy whose 150 ms
// are up then waits its turn to answer, and buys take 260-320 ms there.
// No store waits on its clients' CPU like that, and a rule that learns from
// latency reads it as the store's.

// serveStoreFlag is the flag that makes this program the store's process.
const serveStoreFlag = "serve-store"

// gaugesPath serves the store's gauges (store.Gauges) as one line of four
// numbers: the demo samples them every 10 ms, and the store's JSON metrics
// would cost the machine the demo measures more CPU.
const gaugesPath = "/launchday/gauges"

// storeProcess is a demo store served by a child process, on loopback.
type storeProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner // the child's stdout: one line per command
	addr   string         // host:port
	client *http.Client
}

// startStore starts this program as a store process and waits until it
// listens.
func startStore() (*storeProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return startStoreCommand(exec.Command(exe, "-"+serveStoreFlag))
}

// startStoreCommand starts cmd, a program that runs serveStore, and waits
// until it listens.
func startStoreCommand(cmd *exec.Cmd) (*storeProcess, error) {
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the store: %w", err)
	}
	p := &storeProcess{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout),
		client: &http.Client{Timeout: 5 * time.Second}}
	if p.addr, err = p.reply(); err != nil {
		p.Stop()
		return nil, fmt.Errorf("starting the store: %w", err)
	}
	return p, nil
}

// reply reads the child's answer to its last command (the first: its
// address).
func (p *storeProcess) reply() (string, error) {
	if !p.lines.Scan() {
		if err := p.lines.Err(); err != nil {
			return "", err
		}
		return "", errors.New("the store process exited")
	}
	return p.lines.Text(), nil
}

// Addr returns host:port of the store.
func (p *storeProcess) Addr() string { return p.addr }

// Pid returns the store process's id.
func (p *storeProcess) Pid() int { return p.cmd.Process.Pid }

// Reset replaces the store with a fresh one (counters at zero), so that a
// run counts only its own requests.
func (p *storeProcess) Reset() error {
	if _, err := io.WriteString(p.stdin, "reset\n"); err != nil {
		return err
	}
	switch r, err := p.reply(); {
	case err != nil:
		return err
	case r != "reset":
		return fmt.Errorf("the store process answered %q to reset", r)
	}
	return nil
}

// Metrics returns the store's counters, from its GET /metrics.
func (p *storeProcess) Metrics(ctx context.Context) (store.Metrics, error) {
	var m store.Metrics
	err := p.get(ctx, "/metrics", func(r io.Reader) error { return json.NewDecoder(r).Decode(&m) })
	return m, err
}

// Gauges returns the store's gauges.
func (p *storeProcess) Gauges(ctx context.Context) (store.Gauges, error) {
	var g store.Gauges
	err := p.get(ctx, gaugesPath, func(r io.Reader) error {
		_, err := fmt.Fscan(r, &g.InService, &g.Queued, &g.Orders, &g.BuysPeak)
		return err
	})
	return g, err
}

// get reads the store's answer to GET path with read.
func (p *storeProcess) get(ctx context.Context, path string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("store %s: status %d", path, resp.StatusCode)
	}
	return read(resp.Body)
}

// Stop ends the store process.
func (p *storeProcess) Stop() {
	_ = p.stdin.Close() // the child exits at the end of its input
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// serveStore is the store process: it serves a store on a loopback port,
// writes that port's address as its first line, and then reads commands,
// one a line: "reset" replaces the store with a fresh one and answers
// "reset". It exits at the end of its input (the demo ended or died), not
// on Ctrl-C, which reaches the whole process group: the demo reads the
// interrupted run's figures from it first.
func serveStore() error {
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var current atomic.Pointer[store.Store]
	current.Store(store.New(store.Options{}))
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == gaugesPath {
				g := current.Load().Snapshot()
				fmt.Fprintf(w, "%d %d %d %d\n", g.InService, g.Queued, g.Orders, g.BuysPeak)
				return
			}
			current.Load().ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	fmt.Println(ln.Addr().String())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "reset":
			current.Store(store.New(store.Options{}))
			fmt.Println("reset")
		default:
			return fmt.Errorf("store process: unknown command %q", in.Text())
		}
	}
	return in.Err()
}
