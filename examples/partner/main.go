// Command partner is a partner's order job written with the Sluice SDK: it
// places orders (POST /buy with a JSON body and an Idempotency-Key) against
// a rate-limited API, and prints what the SDK did for it: attempts on the
// wire, 429s seen, waits, successes and the time it took.
//
// Run it against the demo store behind Envoy and the Sluice plugin:
//
//	go run ./examples/partner -base http://127.0.0.1:10000 -orders 100 -workers 20
//
// or against any server that speaks HTTP; nothing in it is specific to the
// store but the path and the body.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/sdk"
)

type config struct {
	base     string
	path     string
	orders   int
	workers  int
	attempts int
	maxWait  time.Duration
	timeout  time.Duration
	verbose  bool
}

func main() {
	var c config
	flag.StringVar(&c.base, "base", "http://127.0.0.1:10000", "base URL of the API (Envoy's listener)")
	flag.StringVar(&c.path, "path", "/buy", "path that places an order")
	flag.IntVar(&c.orders, "orders", 50, "orders to place")
	flag.IntVar(&c.workers, "workers", 10, "orders placed concurrently")
	flag.IntVar(&c.attempts, "attempts", 8, "attempts per order, the first included")
	flag.DurationVar(&c.maxWait, "max-wait", 30*time.Second, "longest single wait the SDK accepts")
	flag.DurationVar(&c.timeout, "timeout", 5*time.Minute, "deadline for the whole job")
	flag.BoolVar(&c.verbose, "v", false, "log every wait and every order")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	s, err := run(ctx, c, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "partner:", err)
		os.Exit(2)
	}
	s.print(os.Stdout, c)
	if s.failed.Load() > 0 {
		os.Exit(1)
	}
}

// summary is what the job and the SDK did.
type summary struct {
	placed, soldOut, failed atomic.Int64
	wire, wire429, wire503  atomic.Int64 // attempts as the server saw them
	wireErr                 atomic.Int64
	retries, holds          atomic.Int64 // waits before a retry / before sending
	waited                  atomic.Int64 // nanoseconds
	giveUps                 sync.Map     // reason -> *atomic.Int64
	elapsed                 time.Duration
}

// wire counts every attempt the SDK sends, below its retries.
type wire struct {
	base http.RoundTripper
	s    *summary
}

func (w wire) RoundTrip(r *http.Request) (*http.Response, error) {
	w.s.wire.Add(1)
	resp, err := w.base.RoundTrip(r)
	switch {
	case err != nil:
		w.s.wireErr.Add(1)
	case resp.StatusCode == http.StatusTooManyRequests:
		w.s.wire429.Add(1)
	case resp.StatusCode == http.StatusServiceUnavailable:
		w.s.wire503.Add(1)
	}
	return resp, err
}

func run(ctx context.Context, c config, out io.Writer) (*summary, error) {
	base := strings.TrimRight(c.base, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("-base %q: want an http:// or https:// URL", c.base)
	}
	if c.orders < 0 || c.workers < 1 {
		return nil, fmt.Errorf("-orders must be >= 0 and -workers >= 1")
	}
	s := &summary{}
	opts := []sdk.Option{
		sdk.WithMaxAttempts(c.attempts),
		sdk.WithMaxWait(c.maxWait),
		sdk.WithRetryHook(func(e sdk.RetryEvent) {
			if e.GiveUp != "" {
				v, _ := s.giveUps.LoadOrStore(e.GiveUp, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
				return
			}
			if e.Reason == sdk.HostLimit {
				s.holds.Add(1)
			} else {
				s.retries.Add(1)
			}
			s.waited.Add(int64(e.Delay))
		}),
	}
	if c.verbose {
		opts = append(opts, sdk.WithLogger(slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	client := &http.Client{Transport: sdk.NewTransport(wire{http.DefaultTransport, s}, opts...)}

	start := time.Now()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < c.workers; w++ {
		wg.Go(func() {
			for n := range jobs {
				place(ctx, client, base+c.path, n, s, c.verbose, out)
			}
		})
	}
	for n := 1; n <= c.orders; n++ {
		jobs <- n
	}
	close(jobs)
	wg.Wait()
	s.elapsed = time.Since(start)
	return s, nil
}

// place places order n once, as far as the partner's code is concerned: the
// SDK retries underneath, and the Idempotency-Key makes those retries safe
// even after a 503 or a broken connection.
func place(ctx context.Context, client *http.Client, url string, n int, s *summary, verbose bool, out io.Writer) {
	body, _ := json.Marshal(map[string]any{
		"partner_order": fmt.Sprintf("P-%06d", n),
		"sku":           "launch-sneaker",
		"quantity":      1,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		s.failed.Add(1)
		fmt.Fprintf(out, "order %d: %v\n", n, err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", newKey())
	resp, err := client.Do(req)
	if err != nil {
		s.failed.Add(1)
		fmt.Fprintf(out, "order %d: %v\n", n, err)
		return
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		s.placed.Add(1)
	case resp.StatusCode == http.StatusConflict:
		s.soldOut.Add(1)
	default:
		s.failed.Add(1)
		detail := strings.TrimSpace(string(msg))
		if err := sdk.CheckResponse(resp); err != nil {
			detail = err.Error()
		}
		fmt.Fprintf(out, "order %d: %s: %s\n", n, resp.Status, detail)
		return
	}
	if verbose {
		fmt.Fprintf(out, "order %d: %s %s\n", n, resp.Status, strings.TrimSpace(string(msg)))
	}
}

func newKey() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *summary) print(w io.Writer, c config) {
	fmt.Fprintf(w, "partner: %d orders to %s%s, %d at a time\n", c.orders, strings.TrimRight(c.base, "/"), c.path, c.workers)
	fmt.Fprintf(w, "  placed    %d\n", s.placed.Load())
	fmt.Fprintf(w, "  sold out  %d\n", s.soldOut.Load())
	fmt.Fprintf(w, "  failed    %d\n", s.failed.Load())
	fmt.Fprintf(w, "  attempts  %d sent (429: %d, 503: %d, transport errors: %d)\n",
		s.wire.Load(), s.wire429.Load(), s.wire503.Load(), s.wireErr.Load())
	fmt.Fprintf(w, "  waits     %d before retries, %d held by the host's limit, %v summed over orders\n",
		s.retries.Load(), s.holds.Load(), time.Duration(s.waited.Load()).Round(time.Millisecond))
	s.giveUps.Range(func(k, v any) bool {
		fmt.Fprintf(w, "  gave up   %d (%s)\n", v.(*atomic.Int64).Load(), k)
		return true
	})
	fmt.Fprintf(w, "  elapsed   %v\n", s.elapsed.Round(time.Millisecond))
}
