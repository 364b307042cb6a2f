package io.delayq.client;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A recurring message ({@code repeat}): {@code every} ms or at {@code cron} times (in the
 * IANA zone {@code tz}, UTC by default), optionally {@code times} occurrences in all or none
 * due after {@code until}; {@code misfire} ({@code one}, {@code all} or {@code skip}) says what
 * occurrences missed while the series fell behind come to.
 *
 * <pre>{@code
 * Repeat.every(20 * 60_000).withTimes(3)
 * Repeat.cron("0 9 * * 1-5").withTz("Asia/Shanghai")
 * }</pre>
 */
public record Repeat(Long every, String cron, String tz, Long times, Long until, String misfire) {
    /** Every {@code ms} (100 ms to 10 years) from the first occurrence. */
    public static Repeat every(long ms) {
        return new Repeat(ms, null, null, null, null, null);
    }

    /** At the times of a 5-field (or 6, seconds first) cron expression, in UTC. */
    public static Repeat cron(String expression) {
        return new Repeat(null, expression, null, null, null, null);
    }

    public Repeat withTz(String zone) {
        return new Repeat(every, cron, zone, times, until, misfire);
    }

    public Repeat withTimes(long n) {
        return new Repeat(every, cron, tz, n, until, misfire);
    }

    public Repeat withUntil(long epochMs) {
        return new Repeat(every, cron, tz, times, epochMs, misfire);
    }

    public Repeat withMisfire(String misfire) {
        return new Repeat(every, cron, tz, times, until, misfire);
    }

    Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        Message.putIf(m, "every", every);
        Message.putIf(m, "cron", cron);
        Message.putIf(m, "tz", tz);
        Message.putIf(m, "times", times);
        Message.putIf(m, "until", until);
        Message.putIf(m, "misfire", misfire);
        return m;
    }
}
