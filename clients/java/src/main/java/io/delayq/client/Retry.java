package io.delayq.client;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A message's retry policy ({@code retry}): the wait before the next delivery after a nack
 * without a delay, or an ack deadline that passed. Without one a failed message is ready
 * again at once. Each wait is at most a day; {@code exponential} doubles {@code delayMs} per
 * failed delivery up to {@code maxMs}.
 *
 * @param backoff {@code fixed} or {@code exponential}; null: the server's default (exponential)
 * @param delayMs the wait after the first failure; null: the server's default (1 000 ms)
 * @param maxMs the longest wait; null: the server's default (1 hour)
 */
public record Retry(String backoff, Long delayMs, Long maxMs) {
    /** The same wait after every failure. */
    public static Retry fixed(long delayMs) {
        return new Retry("fixed", delayMs, null);
    }

    /** {@code delayMs}, then doubling per failure up to {@code maxMs}. */
    public static Retry exponential(long delayMs, long maxMs) {
        return new Retry("exponential", delayMs, maxMs);
    }

    /** The server's default backoff with this first wait. */
    public static Retry after(long delayMs) {
        return new Retry(null, delayMs, null);
    }

    Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        Message.putIf(m, "backoff", backoff);
        Message.putIf(m, "delay", delayMs);
        Message.putIf(m, "max", maxMs);
        return m;
    }
}
