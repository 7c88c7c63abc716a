package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The load generator and the upstream are deliberately lean: both share two
// cores with Envoy, so every cycle they spend is a cycle Envoy does not get.
// The generator is a closed loop of keep-alive HTTP/1.1 connections that
// write a prebuilt request and parse just enough of the response (status,
// Content-Length or chunked framing, Connection: close); the upstream answers
// every request with the same 3-byte body. Neither goes through net/http.

// genOptions describe one closed-loop run.
type genOptions struct {
	Addr  string // host:port of Envoy's listener
	Conns int    // concurrent keep-alive connections, one request in flight each
	// Duration bounds the run; Requests, if > 0, stops it after that many
	// requests in all (whichever comes first; at least one must be set).
	Duration time.Duration
	Requests int64
	Path     string
	// XFF returns the X-Forwarded-For value of request number i ("" for
	// none). Nil: no X-Forwarded-For header.
	XFF func(i int64) string
	// Progress, if set, is incremented after every response.
	Progress *atomic.Int64
}

// genResult is what a run measured.
type genResult struct {
	Requests  int64 // responses received
	Status    map[int]int64
	Errors    int64 // transport errors (each costs a reconnect)
	FirstErr  error
	Elapsed   time.Duration
	Latencies []time.Duration // ascending
}

func (r *genResult) RPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// Quantile returns the latency at q in [0,1] (nearest rank).
func (r *genResult) Quantile(q float64) time.Duration {
	n := len(r.Latencies)
	if n == 0 {
		return 0
	}
	i := int(q*float64(n)+0.5) - 1
	return r.Latencies[max(0, min(i, n-1))]
}

// generate runs the closed loop and returns what it measured.
func generate(ctx context.Context, o genOptions) *genResult {
	if o.Path == "" {
		o.Path = "/"
	}
	if o.Duration <= 0 && o.Requests <= 0 {
		panic("generate: neither Duration nor Requests")
	}
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	var (
		next atomic.Int64
		mu   sync.Mutex
		wg   sync.WaitGroup
		res  = &genResult{Status: map[int]int64{}}
	)
	start := time.Now()
	for c := 0; c < o.Conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &genWorker{addr: o.Addr, status: map[int]int64{}}
			defer w.close()
			lats := make([]time.Duration, 0, 4096)
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if o.Requests > 0 && i >= o.Requests {
					break
				}
				xff := ""
				if o.XFF != nil {
					xff = o.XFF(i)
				}
				t0 := time.Now()
				code, err := w.do(o.Path, xff)
				if err != nil {
					w.errors++
					if w.firstErr == nil {
						w.firstErr = err
					}
					w.close()
					if ctx.Err() == nil {
						time.Sleep(time.Millisecond)
					}
					continue
				}
				lats = append(lats, time.Since(t0))
				w.status[code]++
				if o.Progress != nil {
					o.Progress.Add(1)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.Latencies = append(res.Latencies, lats...)
			for k, v := range w.status {
				res.Status[k] += v
			}
			res.Errors += w.errors
			if res.FirstErr == nil {
				res.FirstErr = w.firstErr
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Requests = int64(len(res.Latencies))
	slices.Sort(res.Latencies)
	return res
}

type genWorker struct {
	addr     string
	conn     net.Conn
	br       *bufio.Reader
	buf      []byte
	status   map[int]int64
	errors   int64
	firstErr error
}

func (w *genWorker) close() {
	if w.conn != nil {
		w.conn.Close()
		w.conn = nil
	}
}

// do sends one request and reads its response, (re)connecting if needed.
func (w *genWorker) do(path, xff string) (int, error) {
	if w.conn == nil {
		c, err := net.DialTimeout("tcp", w.addr, 5*time.Second)
		if err != nil {
			return 0, err
		}
		w.conn = c
		if w.br == nil {
			w.br = bufio.NewReaderSize(c, 16<<10)
		} else {
			w.br.Reset(c)
		}
	}
	_ = w.conn.SetDeadline(time.Now().Add(30 * time.Second))
	b := append(w.buf[:0], "GET "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: bench\r\nUser-Agent: sluice-bench\r\n"...)
	if xff != "" {
		b = append(b, "X-Forwarded-For: "...)
		b = append(b, xff...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	w.buf = b
	if _, err := w.conn.Write(b); err != nil {
		return 0, err
	}
	code, closeConn, err := readResponse(w.br)
	if err != nil {
		return 0, err
	}
	if closeConn {
		w.close()
	}
	return code, nil
}

var errMalformed = errors.New("malformed HTTP response")

// readResponse reads one HTTP/1.1 response and discards its body.
func readResponse(br *bufio.Reader) (code int, closeConn bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, false, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	code, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, false, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	length, chunked := int64(-1), false
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		if len(line) <= 2 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			continue
		}
		name, val := line[:colon], bytes.TrimSpace(line[colon+1:])
		switch {
		case asciiEqualFold(name, "content-length"):
			length, err = strconv.ParseInt(string(val), 10, 64)
			if err != nil {
				return 0, false, fmt.Errorf("%w: content-length %q", errMalformed, val)
			}
		case asciiEqualFold(name, "transfer-encoding"):
			chunked = asciiEqualFold(val, "chunked")
		case asciiEqualFold(name, "connection"):
			closeConn = asciiEqualFold(val, "close")
		}
	}
	switch {
	case chunked:
		for {
			line, err = br.ReadSlice('\n')
			if err != nil {
				return 0, false, err
			}
			sz := bytes.TrimSpace(line)
			if i := bytes.IndexByte(sz, ';'); i >= 0 {
				sz = sz[:i]
			}
			n, err := strconv.ParseInt(string(sz), 16, 64)
			if err != nil {
				return 0, false, fmt.Errorf("%w: chunk size %q", errMalformed, line)
			}
			if n == 0 {
				for { // trailers up to the blank line
					line, err = br.ReadSlice('\n')
					if err != nil {
						return 0, false, err
					}
					if len(line) <= 2 {
						return code, closeConn, nil
					}
				}
			}
			if _, err := br.Discard(int(n) + 2); err != nil {
				return 0, false, err
			}
		}
	case length >= 0:
		if _, err := br.Discard(int(length)); err != nil {
			return 0, false, err
		}
	case code == 204 || code == 304 || code < 200:
	default:
		// Body delimited by the end of the connection.
		_, _ = io.Copy(io.Discard, br)
		closeConn = true
	}
	return code, closeConn, nil
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// leanUpstream answers every HTTP/1.1 request with 200 "ok\n" on a
// keep-alive connection, and counts them.
type leanUpstream struct {
	ln    net.Listener
	count atomic.Int64
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool
}

const upstreamResponse = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n"

func startUpstream() (*leanUpstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &leanUpstream{ln: ln, conns: map[net.Conn]bool{}}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns[c] = true
			u.mu.Unlock()
			u.wg.Add(1)
			go u.serve(c)
		}
	}()
	return u, nil
}

func (u *leanUpstream) Addr() string { return u.ln.Addr().String() }

func (u *leanUpstream) serve(c net.Conn) {
	defer u.wg.Done()
	defer func() {
		u.mu.Lock()
		delete(u.conns, c)
		u.mu.Unlock()
		c.Close()
	}()
	br := bufio.NewReaderSize(c, 16<<10)
	bw := bufio.NewWriterSize(c, 4<<10)
	for {
		// Request line and headers.
		var length int64
		first := true
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if first {
				first = false
				continue
			}
			if len(line) <= 2 {
				break
			}
			if colon := bytes.IndexByte(line, ':'); colon > 0 && asciiEqualFold(line[:colon], "content-length") {
				length, _ = strconv.ParseInt(string(bytes.TrimSpace(line[colon+1:])), 10, 64)
			}
		}
		if length > 0 {
			if _, err := br.Discard(int(length)); err != nil {
				return
			}
		}
		u.count.Add(1)
		bw.WriteString(upstreamResponse)
		if br.Buffered() == 0 { // flush unless more pipelined requests wait
			if err := bw.Flush(); err != nil {
				return
			}
		}
	}
}

func (u *leanUpstream) Close() {
	u.ln.Close()
	u.mu.Lock()
	for c := range u.conns {
		c.Close()
	}
	u.mu.Unlock()
	u.wg.Wait()
}
