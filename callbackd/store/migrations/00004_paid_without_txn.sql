-- +goose Up
-- Generic providers (Standard Webhooks, Stripe-style) may not carry a transaction id: a paid
-- order needs its paid_at, not necessarily a provider_txn_id. (Without this, such a payment
-- would fail its CHECK on every retry and never be applied.)
ALTER TABLE payment_orders DROP CONSTRAINT payment_orders_paid_has_txn;
ALTER TABLE payment_orders ADD CONSTRAINT payment_orders_paid_has_paid_at
    CHECK (status IN ('PENDING', 'CLOSED') OR paid_at IS NOT NULL);
