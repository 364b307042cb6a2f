-- Rows of an application's outbox table (see `delayq outbox install`)
-- that delayq pushed: written in the transaction that inserts their
-- messages, so a row pushed before its node stopped, and not yet deleted
-- from the outbox, is found here and never pushed twice. `source` names
-- the outbox (an id `delayq outbox install` gave it), `row_id` its row and
-- `row_created` the row's created_at: a row id used again (the table
-- truncated with its sequence restarted) is another row. A record is
-- deleted once its row's delete committed; what is left (a pass cut
-- short) goes with retention.
CREATE TABLE outbox_done (
    source VARCHAR(64) NOT NULL,
    row_id BIGINT NOT NULL,
    row_created BIGINT NOT NULL,
    message_id BIGINT NOT NULL,
    done_time BIGINT NOT NULL,
    PRIMARY KEY (source, row_id)
);
CREATE INDEX ix_outbox_done_time ON outbox_done (done_time);
