package io.delayq.client;

import java.util.Map;

/**
 * A message handed to this consumer, with the receipt that names this delivery (an ack or
 * nack with it applies to this delivery alone).
 *
 * @param id the message's id
 * @param topic its topic
 * @param body its body
 * @param receipt names this delivery; a later delivery of the same message has another
 * @param attempts deliveries so far, this one included
 * @param dueTime when it was due (epoch ms)
 * @param bizKey its bizKey, or null
 * @param priority its priority (0 to 255)
 * @param raw the message as the server showed it ({@code ttl}, also as {@link #ttlMs()},
 *     {@code createTime}, {@code occurrence} of a recurring message, ...)
 */
public record Delivery(
        String id,
        String topic,
        String body,
        String receipt,
        int attempts,
        long dueTime,
        String bizKey,
        int priority,
        Map<String, Object> raw) {

    /** A delivery as {@code POST /get/{topic}} shows it. */
    public static Delivery of(Map<String, Object> m) {
        return new Delivery(
                Json.string(m, "id"),
                Json.string(m, "topic"),
                Json.string(m, "body"),
                m.get("receipt") == null ? "" : Json.string(m, "receipt"),
                (int) Json.number(m, "attempts", 0),
                Json.number(m, "dueTime", 0),
                Json.string(m, "bizKey"),
                (int) Json.number(m, "priority", 0),
                m);
    }

    /** Its ordered group, or null when it has none. */
    public String group() {
        return raw.get("group") == null ? null : Json.string(raw, "group");
    }

    /** The server's ttl when a message does not set one, in ms. */
    static final long DEFAULT_TTL_MS = 30_000;

    /**
     * The ms this delivery may take before the message is handed out again (its {@code ttl});
     * 30,000, the server's default, when the server did not say (or said 0).
     */
    public long ttlMs() {
        long ttl = Json.number(raw, "ttl", 0);
        return ttl > 0 ? ttl : DEFAULT_TTL_MS;
    }

    @Override
    public String toString() {
        return "Delivery[id=" + id + ", topic=" + topic + ", attempts=" + attempts + ", receipt=" + receipt + "]";
    }
}
