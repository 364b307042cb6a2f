package io.delayq.client;

import java.util.Map;

/**
 * One ack's outcome, as {@code POST /get/{topic}} and {@code POST /ack} answer it.
 *
 * @param id the message's id
 * @param result {@code consumed}, {@code not_in_flight}, {@code stale_delivery} or
 *     {@code not_found}
 * @param status the message's status where the server says it (a stale delivery: where the
 *     message is now), or null
 */
public record AckResult(String id, String result, String status) {
    static AckResult of(Map<String, Object> m) {
        return new AckResult(Json.string(m, "id"), Json.string(m, "result"), Json.string(m, "status"));
    }

    /** Whether the message is consumed by this ack. */
    public boolean consumed() {
        return "consumed".equals(result);
    }
}
