package sdk

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// readAhead is a response body whose first bytes are read in the
// background, so that neither a retry nor the handing back of a response
// waits for a body that is slow to arrive. Its reader gets the bytes read
// ahead, then what follows them: the rest of the body, or, for a drained
// body, its end (see park).
//
// The read ahead ends when it has its bytes, when the body ends, or when
// the body is closed (net/http's bodies end a read in progress when
// closed), so its goroutine does not outlive the body's Close.
type readAhead struct {
	src       io.ReadCloser
	done      chan struct{} // closed when the read ahead ends
	closed    chan struct{} // closed by Close
	closeOnce sync.Once     // of closed
	srcOnce   sync.Once     // closes src: Close, or a drain that has ended
	srcErr    error

	// Valid once done is closed.
	buf  []byte    // what was read ahead and not yet handed out
	rest io.Reader // what follows buf
}

// readAheadOf replaces resp's body with a readAhead of up to n bytes and
// starts it. A drained one closes the body once it has read n bytes or
// the whole body, so that its connection goes back to the pool; its
// reader meets the end of the body after them, or errTruncated if there
// was more (n is then one past the bytes kept).
func readAheadOf(resp *http.Response, n int, drain bool) *readAhead {
	r := &readAhead{src: resp.Body, done: make(chan struct{}), closed: make(chan struct{})}
	resp.Body = r
	go r.fill(n, drain)
	return r
}

func (r *readAhead) fill(n int, drain bool) {
	defer close(r.done)
	b, err := io.ReadAll(io.LimitReader(r.src, int64(n)))
	switch {
	case drain && len(b) == n:
		b, r.rest = b[:n-1], errReader{errTruncated}
	case err != nil:
		r.rest = errReader{err}
	case drain:
		r.rest = http.NoBody
	default:
		r.rest = r.src
	}
	r.buf = b
	if drain {
		r.closeSrc()
	}
}

// await returns the bytes read ahead once the read ahead ends, or false if
// it does not end within d or before ctx is done.
func (r *readAhead) await(ctx context.Context, d time.Duration) ([]byte, bool) {
	select {
	case <-r.done:
		return r.buf, true
	default:
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-r.done:
		return r.buf, true
	case <-tm.C:
	case <-ctx.Done():
	}
	return nil, false
}

func (r *readAhead) Read(p []byte) (int, error) {
	select {
	case <-r.done:
	case <-r.closed:
	}
	select {
	case <-r.closed:
		return 0, http.ErrBodyReadAfterClose
	default:
	}
	if len(r.buf) > 0 {
		n := copy(p, r.buf)
		r.buf = r.buf[n:]
		return n, nil
	}
	return r.rest.Read(p)
}

// Close closes the body, which ends a read ahead still in progress.
func (r *readAhead) Close() error {
	r.closeOnce.Do(func() { close(r.closed) })
	return r.closeSrc()
}

func (r *readAhead) closeSrc() error {
	r.srcOnce.Do(func() { r.srcErr = r.src.Close() })
	return r.srcErr
}

// park drains, in the background, the body of a response that a retry is
// about to replace: up to DrainLimit bytes, then the body is closed, so
// that its connection goes back to the pool during the wait. The response
// keeps a readable copy of the body, since it is returned if the retry is
// given up before it is sent; a body longer than DrainLimit keeps its
// first DrainLimit bytes and then reads as an error. Nothing waits for the
// drain: a body that stalls delays neither the wait nor the retry, and
// discard closes it once the retry has replaced the response.
func park(resp *http.Response) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	readAheadOf(resp, DrainLimit+1, true)
}

// discard closes the body of a parked response that a retry has replaced
// or that the call drops. A drain that has ended has closed it already;
// one still in progress is cut, which costs its connection: the body has
// had the whole wait, and the retry's round trip, to arrive.
func discard(resp *http.Response) {
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
}

var errTruncated = errors.New("sdk: body of a retried response cut at DrainLimit")

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
