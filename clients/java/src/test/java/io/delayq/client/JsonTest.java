package io.delayq.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.math.BigInteger;
import java.time.LocalDateTime;
import java.time.ZoneId;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The JSON reader and writer, and what a Message sends. No server. */
class JsonTest {
    @Test
    void readsWhatTheServerSends() {
        Object v = Json.parse(" {\"id\":\"384703436408487936\",\"n\":-12,\"big\":18446744073709551616,"
                + "\"f\":1.5e3,\"ok\":true,\"no\":false,\"none\":null,\"list\":[1,[],{}],"
                + "\"s\":\"a\\\"b\\\\c\\/d\\n\\u00e9\\ud83d\\ude00\"} ");
        Map<String, Object> m = Json.object(v);
        assertEquals("384703436408487936", m.get("id"));
        assertEquals(-12L, m.get("n"));
        assertEquals(new BigInteger("18446744073709551616"), m.get("big"));
        assertEquals(1500.0, m.get("f"));
        assertEquals(true, m.get("ok"));
        assertEquals(false, m.get("no"));
        assertEquals(true, m.containsKey("none"));
        assertEquals(Arrays.asList(1L, List.of(), Map.of()), m.get("list"));
        assertEquals("a\"b\\c/d\né\uD83D\uDE00", m.get("s"));
    }

    @Test
    void refusesWhatIsNotJson() {
        for (String bad : List.of("", "{", "[1,]", "{\"a\" 1}", "01x", "\"\\x\"", "tru", "{} {}", "\"a\nb\"")) {
            assertThrows(IllegalArgumentException.class, () -> Json.parse(bad), bad);
        }
    }

    @Test
    void writesAndReadsBack() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("s", "quote \" backslash \\ newline \n tab \t bell \u0007 é 😀");
        m.put("n", 42);
        m.put("l", 1L << 62);
        m.put("d", 1500.0);
        m.put("b", true);
        m.put("z", null);
        m.put("a", List.of("x", 1));
        String text = Json.write(m);
        assertEquals(true, text.contains("\"d\":1500,"));
        Map<String, Object> back = Json.object(Json.parse(text));
        assertEquals(m.get("s"), back.get("s"));
        assertEquals(42L, back.get("n"));
        assertEquals(1L << 62, back.get("l"));
        assertEquals(List.of("x", 1L), back.get("a"));
    }

    @Test
    void aMessageSendsOnlyTheFieldsSet() {
        assertEquals("{\"topic\":\"sms\",\"body\":\"hi\"}", Json.write(Message.of("sms", "hi")));
        Message m = Message.builder("sms", "{\"order\":42}").delayMs(1500).bizKey("o-42").priority(3).ttlMs(10_000)
                .maxAttempts(5).retry(Retry.exponential(100, 5_000)).repeat(Repeat.every(60_000).withTimes(3))
                .build();
        assertEquals("{\"topic\":\"sms\",\"body\":\"{\\\"order\\\":42}\",\"delay\":1500,\"bizKey\":\"o-42\","
                + "\"priority\":3,\"ttl\":10000,\"maxAttempts\":5,"
                + "\"retry\":{\"backoff\":\"exponential\",\"delay\":100,\"max\":5000},"
                + "\"repeat\":{\"every\":60000,\"times\":3}}", Json.write(m));
        Message local = Message.builder("sms", "hi")
                .deliverAtLocal(LocalDateTime.of(2027, 3, 28, 2, 30), ZoneId.of("Europe/Berlin")).dst(Dst.LATER)
                .build();
        assertEquals("{\"topic\":\"sms\",\"body\":\"hi\",\"deliverAtLocal\":\"2027-03-28T02:30\","
                + "\"tz\":\"Europe/Berlin\",\"dst\":\"later\"}", Json.write(local));
        assertEquals("{\"topic\":\"sms\",\"body\":\"hi\",\"bizKey\":\"k\",\"onDuplicate\":\"replace\"}",
                Json.write(Message.builder("sms", "hi").bizKey("k").onDuplicate(OnDuplicate.REPLACE).build()));
        assertEquals(DuplicateOutcome.NOT_LATER, DuplicateOutcome.of("not_later"));
        assertEquals(DuplicateOutcome.UNKNOWN, DuplicateOutcome.of("merged"));
        assertEquals("{\"deliverAtLocal\":\"2027-10-31T02:30:00\",\"tz\":\"Europe/Berlin\",\"dst\":\"earlier\","
                + "\"priority\":4}", Json.write(Reschedule.local("2027-10-31T02:30:00", "Europe/Berlin",
                        Dst.EARLIER).withPriority(4).toMap()));
    }
}
