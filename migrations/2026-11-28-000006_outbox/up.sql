-- Rows of an application's outbox table (see `delayq outbox install`)
-- that delayq pushed: written in the transaction that inserts their
-- messages, so a row pushed before its node stopped, and not yet deleted
-- from the outbox, is found here and never pushed twice. `source` names
-- the outbox (an id `delayq outbox install` gave it), `row_id` its row.
CREATE TABLE outbox_done (
    source VARCHAR(64) NOT NULL,
    row_id BIGINT NOT NULL,
    message_id BIGINT NOT NULL,
    done_time BIGINT NOT NULL,
    PRIMARY KEY (source, row_id)
);
CREATE INDEX ix_outbox_done_time ON outbox_done (done_time);
