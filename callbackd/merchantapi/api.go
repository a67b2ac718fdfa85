// Package merchantapi is callbackd's merchant-facing HTTP API: registering payment orders before
// the user pays, reading an order's state and ledger, and the front-of-checkout protections
// against a user pressing "submit" several times (Idempotency-Key replay and single-use submit
// tokens).
//
// Every route needs a bearer token from the TokenSource. Errors are JSON objects {"error": "..."}
// whose message says what to fix; request bodies are decoded strictly (unknown fields are
// refused) under a size limit. Amounts are integers of minor units, never decimals.
package merchantapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// Header names of the front-of-checkout protections.
const (
	// HeaderIdempotencyKey makes POST /v1/orders replay its first answer for the same key and body.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderSubmitToken carries a single-use token from POST /v1/submit-tokens.
	HeaderSubmitToken = "Submit-Token"
	// HeaderReplayed is set to "true" on an answer replayed for an Idempotency-Key.
	HeaderReplayed = "Idempotent-Replayed"
)

// storeTimeout bounds the database work of one API request.
const storeTimeout = 5 * time.Second

// orderStore is what the handlers need from *store.Store; an interface so unit tests can inject
// failures the real database cannot be made to produce on demand.
type orderStore interface {
	CreateOrder(ctx context.Context, o store.NewOrder) (store.Order, bool, error)
	GetOrder(ctx context.Context, orderNo string) (store.OrderDetails, error)
	IssueSubmitToken(ctx context.Context) (string, error)
	ClaimIdempotencyKey(ctx context.Context, key, digest string) (resp store.StoredResponse, claimed bool, err error)
	RememberResponse(ctx context.Context, key, digest string, status int, body []byte) error
	ReleaseIdempotencyKey(ctx context.Context, key, digest string) error
}

// api serves the routes.
type api struct {
	store  orderStore
	tokens TokenSource
	logger *slog.Logger
	// channels are the channel names orders may be registered for; empty accepts any.
	channels map[string]bool
}

// Option configures the handler.
type Option func(*api)

// WithChannels restricts order registration to the channels this process serves, so that a
// typo in the channel name is a 400 at registration instead of an order no notification can
// ever match.
func WithChannels(names ...string) Option {
	return func(a *api) {
		a.channels = make(map[string]bool, len(names))
		for _, n := range names {
			a.channels[n] = true
		}
	}
}

// New returns the merchant API handler. It serves full paths (/v1/orders, /v1/orders/{order_no},
// /v1/submit-tokens), so the server mounts it at "/v1/". logger is used as given (the caller
// adds its component attribute); bearer tokens never reach it.
func New(st *store.Store, tokens TokenSource, logger *slog.Logger, opts ...Option) http.Handler {
	return newHandler(st, tokens, logger, opts...)
}

func newHandler(st orderStore, tokens TokenSource, logger *slog.Logger, opts ...Option) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &api{store: st, tokens: tokens, logger: logger}
	for _, o := range opts {
		o(a)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/orders", a.createOrder)
	mux.HandleFunc("GET /v1/orders/{order_no}", a.getOrder)
	mux.HandleFunc("POST /v1/submit-tokens", a.issueSubmitToken)
	// The same paths without their method answer 405 in JSON, everything else 404 in JSON.
	mux.HandleFunc("/v1/orders", methodNotAllowed(http.MethodPost))
	mux.HandleFunc("/v1/orders/{order_no}", methodNotAllowed(http.MethodGet))
	mux.HandleFunc("/v1/submit-tokens", methodNotAllowed(http.MethodPost))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such merchant API route")
	})
	return a.authenticate(mux)
}

// authenticate refuses every request without a valid bearer token, before routing, so that the
// API's shape cannot be probed anonymously.
func (a *api) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r)
		if !ok || a.tokens == nil || !a.tokens.Valid(token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="callbackd"`)
			writeError(w, http.StatusUnauthorized, "a valid bearer token is required (Authorization: Bearer <token>)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerToken extracts the token of an "Authorization: Bearer <token>" header.
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	token := strings.TrimSpace(h[len(prefix):])
	return token, token != ""
}

func methodNotAllowed(allowed string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allowed)
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed; use "+allowed)
	}
}

// createOrder registers a payment order: 201 when created, 200 when the same registration is
// repeated, 409 when the order number is taken by a different registration.
func (a *api) createOrder(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()

	key := r.Header.Get(HeaderIdempotencyKey)
	if _, present := r.Header[http.CanonicalHeaderKey(HeaderIdempotencyKey)]; present {
		if err := validateIdempotencyKey(key); err != nil || key == "" {
			if err == nil {
				err = badInput("Idempotency-Key must not be empty")
			}
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		a.withIdempotencyKey(ctx, w, key, requestDigest(r, body), func(rec *responseRecorder) {
			a.registerOrder(ctx, rec, r, body)
		})
		return
	}
	a.registerOrder(ctx, w, r, body)
}

// registerOrder validates the body and creates the order. A presented submit token is consumed
// in the same transaction that registers the order: the order exists if and only if the token
// was spent on it, so a second submit with the token is refused whatever its body.
func (a *api) registerOrder(ctx context.Context, w http.ResponseWriter, r *http.Request, body []byte) {
	var req createOrderRequest
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	in, err := req.validate()
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if len(a.channels) > 0 && !a.channels[in.Channel] {
		writeError(w, http.StatusBadRequest, "channel "+quoteForMessage(in.Channel)+" is not served by this deployment")
		return
	}
	newOrder := in.toStore()
	if _, present := r.Header[http.CanonicalHeaderKey(HeaderSubmitToken)]; present {
		newOrder.SubmitToken = strings.TrimSpace(r.Header.Get(HeaderSubmitToken))
		if newOrder.SubmitToken == "" {
			writeError(w, http.StatusBadRequest, "Submit-Token must not be empty")
			return
		}
	}

	order, created, err := a.store.CreateOrder(ctx, newOrder)
	switch {
	case errors.Is(err, store.ErrAlreadySubmitted):
		writeError(w, http.StatusConflict, "already submitted: this submit token was used before")
		return
	case errors.Is(err, store.ErrNotFound) && newOrder.SubmitToken != "":
		writeError(w, http.StatusBadRequest, "unknown or expired submit token; request a new one from POST /v1/submit-tokens")
		return
	case errors.Is(err, store.ErrOrderConflict):
		writeError(w, http.StatusConflict, "order_no "+in.OrderNo+" is already registered with a different request")
		return
	case errors.Is(err, store.ErrInvalidInput):
		writeError(w, http.StatusBadRequest, "the order was refused by validation: "+strings.TrimPrefix(err.Error(), "store: "))
		return
	case err != nil:
		a.storeFailure(w, "create order", err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		a.logger.Info("order registered", "order_no", order.OrderNo, "channel", order.Channel, "amount", order.Amount, "currency", order.Currency)
	}
	w.Header().Set("Location", "/v1/orders/"+order.OrderNo)
	writeJSON(w, status, orderView(order, nil))
}

// getOrder returns an order's state, payment and ledger.
func (a *api) getOrder(w http.ResponseWriter, r *http.Request) {
	orderNo := r.PathValue("order_no")
	if err := validateOrderNo(orderNo); err != nil {
		writeError(w, http.StatusNotFound, "no order "+quoteForMessage(orderNo))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	details, err := a.store.GetOrder(ctx, orderNo)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, "no order "+quoteForMessage(orderNo))
		return
	case err != nil:
		a.storeFailure(w, "get order", err)
		return
	}
	writeJSON(w, http.StatusOK, orderView(details.Order, details.Ledger))
}

// issueSubmitToken issues one single-use submit token. The body must be empty or {}.
func (a *api) issueSubmitToken(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		var empty struct{}
		if err := decodeStrict(body, &empty); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	token, err := a.store.IssueSubmitToken(ctx)
	if err != nil {
		a.storeFailure(w, "issue submit token", err)
		return
	}
	writeJSON(w, http.StatusCreated, submitTokenView{SubmitToken: token})
}

// withIdempotencyKey runs handle at most once per key: the first request claims the key and its
// answer is stored; a later request with the same key and digest gets that answer replayed; a
// different digest is refused with 422; a request racing the first one gets 409. Answers that
// say nothing durable about the request (5xx) are not stored, so the client's retry runs again.
func (a *api) withIdempotencyKey(ctx context.Context, w http.ResponseWriter, key, digest string, handle func(*responseRecorder)) {
	stored, claimed, err := a.store.ClaimIdempotencyKey(ctx, key, digest)
	switch {
	case errors.Is(err, store.ErrIdempotencyKeyReused):
		writeError(w, http.StatusUnprocessableEntity, "Idempotency-Key was already used with a different request body; use a new key for a new request")
		return
	case errors.Is(err, store.ErrIdempotencyKeyInProgress):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusConflict, "a request with this Idempotency-Key is still in progress; retry shortly")
		return
	case err != nil:
		a.storeFailure(w, "claim idempotency key", err)
		return
	case !claimed:
		w.Header().Set(HeaderReplayed, "true")
		writeRaw(w, stored.Status, stored.Body)
		return
	}

	rec := newResponseRecorder()
	handle(rec)
	// The bookkeeping below must happen even if the client has gone away meanwhile.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if rec.status >= 500 {
		// Let the client's retry run the request again rather than replaying a transient failure.
		if err := a.store.ReleaseIdempotencyKey(bctx, key, digest); err != nil {
			a.logger.Error("release an idempotency key after a failed request", "error", err)
		}
	} else if err := a.store.RememberResponse(bctx, key, digest, rec.status, rec.body.Bytes()); err != nil {
		// This answer is still right for this request; a retry with the key sees the claim in
		// progress until the claim times out and is then run again, which is safe.
		a.logger.Error("remember the answer of an idempotency key", "error", err)
	}
	rec.copyTo(w)
}

// requestDigest identifies a request for Idempotency-Key comparison: its route, the submit token
// it presents and its exact body.
func requestDigest(r *http.Request, body []byte) string {
	h := sha256.New()
	h.Write([]byte(r.Method + " " + r.URL.Path + "\n"))
	tok := sha256.Sum256([]byte(r.Header.Get(HeaderSubmitToken)))
	h.Write(tok[:])
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// storeFailure answers 503 for a database failure and logs it; the caller may retry.
func (a *api) storeFailure(w http.ResponseWriter, op string, err error) {
	if errors.Is(err, context.Canceled) {
		// The client went away; nobody reads the answer.
		writeError(w, http.StatusServiceUnavailable, "request cancelled")
		return
	}
	a.logger.Error("merchant API storage failure", "op", op, "error", err)
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, "storage temporarily unavailable; retry")
}

// readBody reads the request body under MaxBodyBytes, answering 413 or 400 itself on failure.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body larger than the limit of 64 KiB")
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "could not read the request body")
		return nil, false
	}
	return body, true
}

// quoteForMessage quotes a path value for an error message, shortened so that an error never
// echoes a long attacker-chosen string.
func quoteForMessage(s string) string {
	if len(s) > maxOrderNo {
		s = s[:maxOrderNo] + "…"
	}
	b, _ := json.Marshal(s)
	return string(b)
}
