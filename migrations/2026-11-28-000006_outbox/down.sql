DROP TABLE outbox_done;
