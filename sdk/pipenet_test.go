//go:build go1.25

package sdk

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// pipeNet is an in-memory network for an httptest.Server inside a
// testing/synctest bubble: connections are net.Pipe pairs, whose reads and
// writes block on channels of the bubble, so that virtual time advances
// while client and server wait on each other (a loopback socket would
// stall it). Everything above the connection is the real net/http client
// and server.
type pipeNet struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeNet() *pipeNet {
	return &pipeNet{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (p *pipeNet) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}

func (p *pipeNet) Close() error {
	p.once.Do(func() { close(p.done) })
	return nil
}

func (p *pipeNet) Addr() net.Addr { return pipeAddr{} }

func (p *pipeNet) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case p.conns <- server:
		return client, nil
	case <-p.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "127.0.0.1:80" }

// servePipe starts an httptest.Server for h on a pipeNet, and returns it
// with an http.Transport that dials it. Call it inside the bubble; the
// cleanup closes both before the bubble ends.
func servePipe(t *testing.T, h http.Handler) (*httptest.Server, *http.Transport) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close() // the loopback listener it opened: not used
	pn := newPipeNet()
	srv.Listener = pn
	srv.Start()
	tr := &http.Transport{DialContext: pn.DialContext, MaxIdleConnsPerHost: 1000}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return srv, tr
}
