-- +goose Up
-- The reconciler's work list: per channel, the orders still PENDING, oldest first (see
-- store.PendingOrders). Partial, so it stays as small as the set of unpaid orders.
CREATE INDEX payment_orders_pending_created ON payment_orders (channel, created_at, order_no) WHERE status = 'PENDING';
