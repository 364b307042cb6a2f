package io.delayq.client;

import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneId;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * A message to push, as {@code POST /push} takes it. Fields left unset are not sent, and
 * take the server's defaults (due now, priority 0, ttl 30 s, 16 attempts, no retry wait).
 *
 * <pre>{@code
 * Message m = Message.builder("sms", "{\"order\":42}")
 *         .delay(Duration.ofMinutes(20))
 *         .bizKey("order-42-reminder")
 *         .retry(Retry.exponential(1_000, 60_000))
 *         .build();
 * }</pre>
 */
public final class Message {
    private final String topic;
    private final String body;
    private final Long delayMs;
    private final Long deliverAt;
    private final String deliverAtLocal;
    private final String tz;
    private final Dst dst;
    private final String bizKey;
    private final Integer priority;
    private final Long ttlMs;
    private final Integer maxAttempts;
    private final Retry retry;
    private final Repeat repeat;
    private final OnDuplicate onDuplicate;
    private final String group;

    private Message(Builder b) {
        this.topic = b.topic;
        this.body = b.body;
        this.delayMs = b.delayMs;
        this.deliverAt = b.deliverAt;
        this.deliverAtLocal = b.deliverAtLocal;
        this.tz = b.tz;
        this.dst = b.dst;
        this.bizKey = b.bizKey;
        this.priority = b.priority;
        this.ttlMs = b.ttlMs;
        this.maxAttempts = b.maxAttempts;
        this.retry = b.retry;
        this.repeat = b.repeat;
        this.onDuplicate = b.onDuplicate;
        this.group = b.group;
    }

    /** A message of {@code topic} carrying {@code body} (text; JSON text welcome). */
    public static Builder builder(String topic, String body) {
        return new Builder(topic, body);
    }

    /** A message due now, with the server's defaults. */
    public static Message of(String topic, String body) {
        return builder(topic, body).build();
    }

    public String topic() {
        return topic;
    }

    public String body() {
        return body;
    }

    /** The delay in ms, or null when not set. */
    public Long delayMs() {
        return delayMs;
    }

    /** The due time in epoch ms, or null when not set. */
    public Long deliverAt() {
        return deliverAt;
    }

    /** The local wall-clock time it is due at, or null when not set. */
    public String deliverAtLocal() {
        return deliverAtLocal;
    }

    /** The IANA zone of {@link #deliverAtLocal()}, or null when not set. */
    public String tz() {
        return tz;
    }

    /** The rule for a {@link #deliverAtLocal()} in a DST gap or fold, or null when not set. */
    public Dst dst() {
        return dst;
    }

    /** The bizKey, or null: a push is sent to a second node only with one. */
    public String bizKey() {
        return bizKey;
    }

    public Integer priority() {
        return priority;
    }

    public Long ttlMs() {
        return ttlMs;
    }

    public Integer maxAttempts() {
        return maxAttempts;
    }

    public Retry retry() {
        return retry;
    }

    public Repeat repeat() {
        return repeat;
    }

    /** What the push does to a live message holding its bizKey, or null when not set (keep). */
    public OnDuplicate onDuplicate() {
        return onDuplicate;
    }

    /** Its ordered group, or null. */
    public String group() {
        return group;
    }

    /** The JSON object sent: only the fields that are set, under their wire names. */
    public Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("topic", topic);
        m.put("body", body);
        putIf(m, "delay", delayMs);
        putIf(m, "deliverAt", deliverAt);
        putIf(m, "deliverAtLocal", deliverAtLocal);
        putIf(m, "tz", tz);
        putIf(m, "dst", dst == null ? null : dst.wire());
        putIf(m, "bizKey", bizKey);
        putIf(m, "priority", priority);
        putIf(m, "ttl", ttlMs);
        putIf(m, "maxAttempts", maxAttempts);
        putIf(m, "retry", retry == null ? null : retry.toMap());
        putIf(m, "repeat", repeat == null ? null : repeat.toMap());
        putIf(m, "onDuplicate", onDuplicate == null ? null : onDuplicate.wire());
        putIf(m, "group", group);
        return m;
    }

    /**
     * The JSON text of a row of the transactional outbox's {@code message} column: this message
     * exactly as {@link DelayqClient#push(Message)} sends it. Insert it in the application's own
     * transaction (PostgreSQL {@code INSERT INTO delayq_outbox (message) VALUES (?::json)}, MySQL
     * {@code ... VALUES (?)}); a delayq node started with {@code --outbox-url} pushes each
     * committed row once. See "Transactional enqueue: the outbox" in docs/src/operating.md.
     *
     * @throws IllegalArgumentException when {@link #onDuplicate()} is {@link OnDuplicate#REPLACE}
     *     or {@link OnDuplicate#EXTEND}: the server refuses those in an outbox row, so only
     *     {@link OnDuplicate#KEEP} or none is taken
     */
    public String outboxRow() {
        if (onDuplicate != null && onDuplicate != OnDuplicate.KEEP) {
            throw new IllegalArgumentException("onDuplicate " + onDuplicate.wire()
                    + " is refused in an outbox row: only keep or none");
        }
        return Json.write(toMap());
    }

    static void putIf(Map<String, Object> m, String key, Object value) {
        if (value != null) {
            m.put(key, value);
        }
    }

    @Override
    public String toString() {
        return Json.write(toMap());
    }

    /** Builds a {@link Message}; every setter is optional. */
    public static final class Builder {
        private final String topic;
        private final String body;
        private Long delayMs;
        private Long deliverAt;
        private String deliverAtLocal;
        private String tz;
        private Dst dst;
        private String bizKey;
        private Integer priority;
        private Long ttlMs;
        private Integer maxAttempts;
        private Retry retry;
        private Repeat repeat;
        private OnDuplicate onDuplicate;
        private String group;

        private Builder(String topic, String body) {
            this.topic = Objects.requireNonNull(topic, "topic");
            this.body = Objects.requireNonNull(body, "body");
        }

        /** Due this many ms from now (0 to 10 years); not with {@link #deliverAt}. */
        public Builder delayMs(long ms) {
            this.delayMs = ms;
            return this;
        }

        /** Due this long from now (whole ms). */
        public Builder delay(Duration delay) {
            return delayMs(delay.toMillis());
        }

        /** Due at this epoch time in ms (in the past means now); not with {@link #delayMs}. */
        public Builder deliverAt(long epochMs) {
            this.deliverAt = epochMs;
            return this;
        }

        public Builder deliverAt(Instant at) {
            return deliverAt(at.toEpochMilli());
        }

        /**
         * Due at a local wall-clock time, {@code YYYY-MM-DDTHH:MM[:SS[.fff]]} with no offset
         * ({@code "2027-03-28T09:00:00"}), read by the server in the IANA zone {@code tz}
         * ({@code "Europe/Berlin"}); not with {@link #delayMs} or {@link #deliverAt}. A time the
         * zone's clock jumps over or passes twice is refused ({@code invalid_delay}) unless
         * {@link #dst} says which instant it means.
         */
        public Builder deliverAtLocal(String wall, String tz) {
            this.deliverAtLocal = Objects.requireNonNull(wall, "wall");
            this.tz = Objects.requireNonNull(tz, "tz");
            return this;
        }

        public Builder deliverAtLocal(LocalDateTime wall, ZoneId zone) {
            return deliverAtLocal(wall.toString(), zone.getId());
        }

        /** With {@link #deliverAtLocal}: which instant a time in a DST gap or fold means. */
        public Builder dst(Dst dst) {
            this.dst = dst;
            return this;
        }

        /**
         * The producer's business key, unique per topic among live messages: pushing it again
         * answers the live message's id ({@link Pushed#duplicate()}), so the push is idempotent.
         */
        public Builder bizKey(String bizKey) {
            this.bizKey = bizKey;
            return this;
        }

        /** 0 to 255, higher first among messages due at the same instant. */
        public Builder priority(int priority) {
            this.priority = priority;
            return this;
        }

        /** How long a consumer has to ack a delivery (100 ms to 1 day; default 30 s). */
        public Builder ttlMs(long ms) {
            this.ttlMs = ms;
            return this;
        }

        public Builder ttl(Duration ttl) {
            return ttlMs(ttl.toMillis());
        }

        /** Deliveries before the message is {@code Dead} (1 to 1000; default 16). */
        public Builder maxAttempts(int n) {
            this.maxAttempts = n;
            return this;
        }

        /** The wait before the next delivery after a nack without a delay or an expired ttl. */
        public Builder retry(Retry retry) {
            this.retry = retry;
            return this;
        }

        /** Makes it a recurring message: one delivery per occurrence. */
        public Builder repeat(Repeat repeat) {
            this.repeat = repeat;
            return this;
        }

        /**
         * With {@link #bizKey}: what the push does to a live message of the topic holding the key,
         * {@link OnDuplicate#KEEP} (the default), {@link OnDuplicate#REPLACE} (debounce) or
         * {@link OnDuplicate#EXTEND}; {@link Pushed#result()} says what it did. Without a bizKey
         * the push is refused (400 {@code invalid_field}).
         */
        public Builder onDuplicate(OnDuplicate onDuplicate) {
            this.onDuplicate = onDuplicate;
            return this;
        }

        /**
         * Its ordered group in the topic (1 to 256 characters): one message of the group is handed
         * out at a time (the next once it is acked, dead or cancelled), in due order. Otherwise
         * 400 {@code invalid_group}.
         */
        public Builder group(String group) {
            this.group = group;
            return this;
        }

        public Message build() {
            return new Message(this);
        }
    }
}
