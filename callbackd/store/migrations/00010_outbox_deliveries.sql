-- +goose Up
-- Per-endpoint delivery state of outbox events.
--
-- An event fans out to every delivery endpoint of its channel whose event filter matches, and
-- each (event, endpoint) pair retries, succeeds or dead-letters on its own: one merchant system
-- being down must neither hold back nor re-send the others. The endpoints live in the channel's
-- configuration (rendered from the PaymentChannel), not in the database, so the fan-out is done
-- by the dispatcher when it first sees an event rather than by a trigger inside Apply: the
-- exactly-once transaction stays as short as it is, and an endpoint added later applies to every
-- event not fanned out yet.
--
-- outbox_events.status becomes a roll-up kept by the dispatcher: DEAD when a delivery is dead,
-- DELIVERED when all are delivered (or no endpoint matched), PENDING otherwise.

-- expanded_at: when the dispatcher created the event's deliveries; NULL until then.
ALTER TABLE outbox_events ADD COLUMN expanded_at timestamptz;

CREATE INDEX outbox_events_unexpanded ON outbox_events (channel, id) WHERE expanded_at IS NULL;

CREATE TABLE outbox_deliveries (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_row_id     bigint      NOT NULL REFERENCES outbox_events (id) ON DELETE CASCADE,
    -- event_id and channel are copied from the event so that the dispatcher's queries and the
    -- operator's look-ups never join. The webhook-id sent is event_id || ':' || endpoint.
    event_id         text        NOT NULL,
    channel          text        NOT NULL,
    endpoint         text        NOT NULL CHECK (endpoint <> ''),
    status           text        NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DELIVERED', 'DEAD')),
    -- attempts counts the attempts of the current cycle (a redelivery starts a new one). It is
    -- incremented when an attempt is claimed, so an attempt cut short by a crash still counts.
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- next_attempt_at is when the delivery is due; while an attempt is in flight it is the end
    -- of the claim's lease, after which another dispatcher may take the delivery over.
    next_attempt_at  timestamptz NOT NULL,
    -- lease_token identifies the claim in flight (NULL when none): only the claimant may record
    -- the attempt's result.
    lease_token      text,
    last_attempt_at  timestamptz,
    last_http_status integer,
    last_error       text        NOT NULL DEFAULT '',
    delivered_at     timestamptz,
    redeliveries     integer     NOT NULL DEFAULT 0 CHECK (redeliveries >= 0),
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outbox_deliveries_once UNIQUE (event_id, endpoint),
    CONSTRAINT outbox_deliveries_lease CHECK (lease_token IS NULL OR status = 'PENDING')
);

-- The dispatcher's claim: due deliveries of one endpoint, oldest first.
CREATE INDEX outbox_deliveries_due ON outbox_deliveries (channel, endpoint, next_attempt_at, id)
    WHERE status = 'PENDING';
-- The roll-up of an event's status.
CREATE INDEX outbox_deliveries_event ON outbox_deliveries (event_row_id);
-- Dead letters, newest first, per channel.
CREATE INDEX outbox_deliveries_dead ON outbox_deliveries (channel, id) WHERE status = 'DEAD';
