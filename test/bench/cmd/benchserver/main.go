// Command benchserver is the benchmark's stand-in servers, each run as a process of its own so
// that it is measured the way callbackd is (same load generator, same loopback, its own runtime):
//
//	benchserver verify --keys DIR --listen ADDR
//	    the limit handler: verifies a WeChat Pay v3 notification with callbackd's own adapter
//	    (signature, timestamp window, decryption, merchant identity) and answers 204; nothing else.
//	benchserver field --design NAME --keys DIR --dsn DSN --redis ADDR --listen ADDR
//	    one design from the field (test/bench/field) on the same verification.
//
// Both answer GET /healthz with 200 once serving. They only listen on loopback.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
	"github.com/seed-1cff2221/callback-platform/test/bench/field"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "benchserver: %v\n", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: benchserver verify|field [flags]")
	}
	fs := flag.NewFlagSet("benchserver "+args[0], flag.ContinueOnError)
	keysDir := fs.String("keys", "", "paysim key set folder (WeChat Pay channel)")
	listen := fs.String("listen", "127.0.0.1:0", "loopback address to serve on")
	design := fs.String("design", "", "design from the field: "+field.NameCheckThenAct+", "+field.NameUniqueIndexOnly+" or "+field.NameRedisLockOnly)
	dsn := fs.String("dsn", "", "PostgreSQL DSN (field)")
	redisAddr := fs.String("redis", "", "Redis master address (field)")
	maxConns := fs.Int("max-conns", 20, "PostgreSQL pool size (field), as callbackd's")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	set, err := keyset.Load(*keysDir)
	if err != nil {
		return err
	}
	verify, err := field.WeChatVerifier(ctx, set)
	if err != nil {
		return err
	}
	var h http.Handler
	switch args[0] {
	case "verify":
		h = verifyHandler(verify)
	case "field":
		cfg, err := pgxpool.ParseConfig(*dsn)
		if err != nil {
			return fmt.Errorf("--dsn: %w", err)
		}
		cfg.MaxConns = int32(*maxConns)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("connect PostgreSQL: %w", err)
		}
		defer pool.Close()
		rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, PoolSize: 64})
		defer rdb.Close()
		for _, d := range field.Designs(pool, rdb, verify) {
			if d.Name == *design {
				h = d.Handler
			}
		}
		if h == nil {
			return fmt.Errorf("--design %q: no such design", *design)
		}
	default:
		return fmt.Errorf("unknown mode %q (verify or field)", args[0])
	}
	return serve(ctx, *listen, h)
}

// verifyHandler is the limit: read the body, verify it, answer 204 (or 401 when it does not
// verify). A notification that verifies but asks for no effect is still a 204.
func verifyHandler(verify field.VerifyFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, field.MaxBody))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if _, _, _, err := verify(r, body); err != nil && !errors.Is(err, field.ErrNoEffect) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

func serve(ctx context.Context, addr string, h http.Handler) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--listen %q: loopback only", addr)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("/", h)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
