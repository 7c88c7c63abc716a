// Command store runs the launch-day demo shop (package
// github.com/sluicehq/sluice/examples/store) on its own:
//
//	go run ./examples/store/cmd/store -addr 127.0.0.1:8080
//
// It serves GET /, POST /login, GET /products, GET /cart and POST /buy through
// a pool of worker slots, and its counters at GET /metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/examples/store"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	workers := flag.Int("workers", store.DefaultWorkers, "number of requests served at the same time; the rest queue")
	flag.Parse()

	shop := store.New(store.Options{Workers: *workers})
	srv := &http.Server{Addr: *addr, Handler: shop, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()

	log.Printf("store: %d worker slots, listening on http://%s (metrics at /metrics)", shop.Workers(), *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("store: %v", err)
	}
}
