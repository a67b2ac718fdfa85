-- +goose Up
-- The payment core: orders registered by the merchant, one receipt per notification idempotency
-- key, the ledger of effects, the transactional outbox and the exceptions that need a person.
-- Amounts are bigint minor units everywhere; currencies are ISO 4217 codes in upper case.

CREATE TABLE payment_orders (
    order_no         text        PRIMARY KEY CHECK (order_no <> ''),
    channel          text        NOT NULL CHECK (channel <> ''),
    merchant_id      text        NOT NULL CHECK (merchant_id <> ''),
    sub_merchant_id  text        NOT NULL DEFAULT '',
    amount           bigint      NOT NULL CHECK (amount > 0),
    currency         text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    status           text        NOT NULL DEFAULT 'PENDING'
                     CHECK (status IN ('PENDING', 'PAID', 'PARTIALLY_REFUNDED', 'REFUNDED', 'CLOSED')),
    refunded_amount  bigint      NOT NULL DEFAULT 0 CHECK (refunded_amount >= 0 AND refunded_amount <= amount),
    provider_txn_id  text        NOT NULL DEFAULT '',
    paid_at          timestamptz,
    closed_at        timestamptz,
    expires_at       timestamptz,
    -- request_digest is the SHA-256 of the registration's canonical fields: the same request
    -- again returns the same order, a different one for the same order_no is a conflict.
    request_digest   text        NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- The state machine's invariants, enforced by the database as a last line of defence.
    CONSTRAINT payment_orders_paid_has_txn
        CHECK (status IN ('PENDING', 'CLOSED') OR (provider_txn_id <> '' AND paid_at IS NOT NULL)),
    CONSTRAINT payment_orders_refund_state
        CHECK ((status = 'REFUNDED') = (refunded_amount = amount)
               AND (status = 'PARTIALLY_REFUNDED') = (refunded_amount > 0 AND refunded_amount < amount))
);

-- The reconciler sweeps orders that stayed PENDING past their deadline.
CREATE INDEX payment_orders_pending_expiry ON payment_orders (expires_at) WHERE status = 'PENDING';

CREATE TABLE callback_receipts (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key  text        NOT NULL,
    channel          text        NOT NULL,
    provider         text        NOT NULL DEFAULT '',
    merchant_id      text        NOT NULL,
    sub_merchant_id  text        NOT NULL DEFAULT '',
    order_no         text        NOT NULL,
    kind             text        NOT NULL CHECK (kind IN ('payment', 'close', 'refund')),
    out_refund_no    text        NOT NULL DEFAULT '',
    status           text        NOT NULL,
    amount           bigint      NOT NULL,
    currency         text        NOT NULL DEFAULT '',
    provider_txn_id  text        NOT NULL DEFAULT '',
    notify_id        text        NOT NULL DEFAULT '',
    body_digest      text        NOT NULL DEFAULT '',
    outcome          text        NOT NULL,
    occurred_at      timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT callback_receipts_idempotency_key UNIQUE (idempotency_key)
);

-- Retention purges receipts by age.
CREATE INDEX callback_receipts_created_at ON callback_receipts (created_at);

CREATE TABLE ledger_entries (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_no           text        NOT NULL REFERENCES payment_orders (order_no),
    entry_type         text        NOT NULL CHECK (entry_type IN ('payment', 'refund')),
    -- refund_no is '' for the payment, the merchant's refund number for a refund.
    refund_no          text        NOT NULL DEFAULT '',
    amount             bigint      NOT NULL CHECK (amount > 0),
    currency           text        NOT NULL,
    provider_txn_id    text        NOT NULL DEFAULT '',
    provider_refund_id text        NOT NULL DEFAULT '',
    idempotency_key    text        NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ledger_entries_refund_no CHECK ((entry_type = 'payment') = (refund_no = '')),
    -- One effect per order and event: a payment once, each refund number once.
    CONSTRAINT ledger_entries_once UNIQUE (order_no, entry_type, refund_no)
);

CREATE TABLE outbox_events (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- event_id is stable across retries (derived from the idempotency key): it is the
    -- webhook-id merchants deduplicate on.
    event_id        text        NOT NULL,
    channel         text        NOT NULL,
    order_no        text        NOT NULL,
    event_type      text        NOT NULL,
    payload         jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DELIVERED', 'DEAD')),
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    CONSTRAINT outbox_events_event_id UNIQUE (event_id)
);

-- The dispatcher's query: pending events that are due, oldest first.
CREATE INDEX outbox_events_due ON outbox_events (next_attempt_at, id) WHERE status = 'PENDING';

CREATE TABLE payment_exceptions (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             text        NOT NULL
                     CHECK (kind IN ('duplicate_payment', 'payment_on_closed_order',
                                     'refund_exceeds_paid', 'refund_on_closed_order')),
    order_no         text        NOT NULL,
    idempotency_key  text        NOT NULL,
    provider_txn_id  text        NOT NULL DEFAULT '',
    amount           bigint      NOT NULL,
    currency         text        NOT NULL DEFAULT '',
    detail           text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    resolved_at      timestamptz,
    -- A retried exceptional notification is recorded once.
    CONSTRAINT payment_exceptions_once UNIQUE (order_no, idempotency_key, provider_txn_id)
);

CREATE INDEX payment_exceptions_unresolved ON payment_exceptions (created_at) WHERE resolved_at IS NULL;
