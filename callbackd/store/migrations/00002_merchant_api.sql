-- +goose Up
-- Front-of-checkout protection for the merchant API.

-- Idempotency-Key: the first request's digest and, once finished, its response. A row whose
-- response_status is NULL is a request in progress.
CREATE TABLE api_idempotency_keys (
    idempotency_key  text        PRIMARY KEY CHECK (idempotency_key <> ''),
    request_digest   text        NOT NULL,
    response_status  integer,
    response_body    bytea,
    created_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz
);

CREATE INDEX api_idempotency_keys_created_at ON api_idempotency_keys (created_at);

-- Single-use submit tokens. Only the SHA-256 of a token is stored, so a database dump cannot be
-- replayed against the API.
CREATE TABLE submit_tokens (
    token_hash   text        PRIMARY KEY,
    order_no     text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    consumed_at  timestamptz,
    CONSTRAINT submit_tokens_consumed CHECK ((consumed_at IS NULL) = (order_no IS NULL))
);

CREATE INDEX submit_tokens_created_at ON submit_tokens (created_at);
