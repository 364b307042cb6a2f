package io.delayq.client;

import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneId;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Where {@code POST /reschedule} moves messages: a new {@code delay} (ms from now),
 * {@code deliverAt} (epoch ms) or {@code deliverAtLocal} (a wall-clock time in the IANA zone
 * {@code tz}, with {@code dst} for a time the zone's clock jumps over or passes twice), and/or a
 * new {@code priority}. {@code series} moves a recurring message's whole series, not only its
 * pending occurrence.
 *
 * <pre>{@code
 * Reschedule.delay(Duration.ofMinutes(5)).withPriority(9)
 * Reschedule.local("2027-10-31T02:30:00", "Europe/Berlin", Dst.EARLIER)
 * }</pre>
 */
public record Reschedule(Long delayMs, Long deliverAt, String deliverAtLocal, String tz, Dst dst, Integer priority,
        Boolean series) {
    /** A new delay, time and/or priority, without a local time. */
    public Reschedule(Long delayMs, Long deliverAt, Integer priority, Boolean series) {
        this(delayMs, deliverAt, null, null, null, priority, series);
    }

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

    /**
     * Due at a local wall-clock time, {@code YYYY-MM-DDTHH:MM[:SS[.fff]]} with no offset
     * ({@code "2027-03-28T09:00:00"}), read by the server in the IANA zone {@code tz}
     * ({@code "Europe/Berlin"}); {@code dst} says which instant a time the zone's clock jumps
     * over or passes twice means ({@link Dst#REJECT}: refused with {@code invalid_delay}).
     */
    public static Reschedule local(String wall, String tz, Dst dst) {
        return new Reschedule(null, null, wall, tz, dst, null, null);
    }

    public static Reschedule local(LocalDateTime wall, ZoneId zone, Dst dst) {
        return local(wall.toString(), zone.getId(), dst);
    }

    /** Only a new priority: the due time stays. */
    public static Reschedule priority(int priority) {
        return new Reschedule(null, null, priority, null);
    }

    public Reschedule withPriority(int priority) {
        return new Reschedule(delayMs, deliverAt, deliverAtLocal, tz, dst, priority, series);
    }

    public Reschedule withSeries(boolean series) {
        return new Reschedule(delayMs, deliverAt, deliverAtLocal, tz, dst, priority, series);
    }

    void into(Map<String, Object> body) {
        Message.putIf(body, "delay", delayMs);
        Message.putIf(body, "deliverAt", deliverAt);
        Message.putIf(body, "deliverAtLocal", deliverAtLocal);
        Message.putIf(body, "tz", tz);
        Message.putIf(body, "dst", dst == null ? null : dst.wire());
        Message.putIf(body, "priority", priority);
        Message.putIf(body, "series", series);
    }

    Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        into(m);
        return m;
    }
}
