package io.delayq.client;

import java.time.Duration;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Where {@code POST /reschedule} moves messages: a new {@code delay} (ms from now) or
 * {@code deliverAt} (epoch ms), and/or a new {@code priority}. {@code series} moves a
 * recurring message's whole series, not only its pending occurrence.
 *
 * <pre>{@code
 * Reschedule.delay(Duration.ofMinutes(5)).withPriority(9)
 * }</pre>
 */
public record Reschedule(Long delayMs, Long deliverAt, Integer priority, Boolean series) {
    public static Reschedule delayMs(long ms) {
        return new Reschedule(ms, null, null, null);
    }

    public static Reschedule delay(Duration delay) {
        return delayMs(delay.toMillis());
    }

    public static Reschedule deliverAt(long epochMs) {
        return new Reschedule(null, epochMs, null, null);
    }

    public static Reschedule deliverAt(Instant at) {
        return deliverAt(at.toEpochMilli());
    }

    /** Only a new priority: the due time stays. */
    public static Reschedule priority(int priority) {
        return new Reschedule(null, null, priority, null);
    }

    public Reschedule withPriority(int priority) {
        return new Reschedule(delayMs, deliverAt, priority, series);
    }

    public Reschedule withSeries(boolean series) {
        return new Reschedule(delayMs, deliverAt, priority, series);
    }

    void into(Map<String, Object> body) {
        Message.putIf(body, "delay", delayMs);
        Message.putIf(body, "deliverAt", deliverAt);
        Message.putIf(body, "priority", priority);
        Message.putIf(body, "series", series);
    }

    Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        into(m);
        return m;
    }
}
