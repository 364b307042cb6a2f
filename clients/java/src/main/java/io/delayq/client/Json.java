package io.delayq.client;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small JSON reader and writer, enough for delayq's API and nothing more.
 *
 * <p>Reading gives {@code Map<String, Object>} (in document order), {@code List<Object>},
 * {@code String}, {@code Long} (whole numbers that fit), {@code BigInteger} (larger whole
 * numbers), {@code Double} (numbers with a fraction or an exponent), {@code Boolean} and
 * {@code null}. Writing takes the same kinds, any {@link Number}, {@link Collection}s, arrays
 * of objects, and {@link Message}s.
 */
public final class Json {
    private Json() {}

    /** Parses one JSON document; {@link IllegalArgumentException} when it is not one. */
    public static Object parse(String text) {
        Reader r = new Reader(text);
        r.space();
        Object v = r.value();
        r.space();
        if (r.pos != text.length()) {
            throw r.error("text after the document");
        }
        return v;
    }

    /** Writes a value as compact JSON. */
    public static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(value, out);
        return out.toString();
    }

    // -- reading fields of a parsed reply ------------------------------------

    static String string(Map<String, Object> m, String key) {
        Object v = m.get(key);
        return v == null ? null : v.toString();
    }

    static long number(Map<String, Object> m, String key, long otherwise) {
        return m.get(key) instanceof Number n ? n.longValue() : otherwise;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> object(Object v) {
        return v instanceof Map<?, ?> ? (Map<String, Object>) v : Map.of();
    }

    @SuppressWarnings("unchecked")
    static List<Object> list(Object v) {
        return v instanceof List<?> ? (List<Object>) v : List.of();
    }

    private static void write(Object v, StringBuilder out) {
        if (v == null) {
            out.append("null");
        } else if (v instanceof String s) {
            quote(s, out);
        } else if (v instanceof Boolean b) {
            out.append(b.booleanValue());
        } else if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) {
                throw new IllegalArgumentException("JSON has no " + d);
            }
            out.append(d == Math.rint(d) && Math.abs(d) < 1e15 ? Long.toString((long) d) : Double.toString(d));
        } else if (v instanceof Number n) {
            out.append(n instanceof BigDecimal bd ? bd.toPlainString() : n.toString());
        } else if (v instanceof Map<?, ?> m) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                quote(String.valueOf(e.getKey()), out);
                out.append(':');
                write(e.getValue(), out);
            }
            out.append('}');
        } else if (v instanceof Collection<?> c) {
            out.append('[');
            boolean first = true;
            for (Object o : c) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                write(o, out);
            }
            out.append(']');
        } else if (v instanceof Object[] a) {
            write(List.of(a), out);
        } else if (v instanceof Message m) {
            write(m.toMap(), out);
        } else {
            throw new IllegalArgumentException("cannot write a " + v.getClass().getName() + " as JSON");
        }
    }

    private static void quote(String s, StringBuilder out) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                case '\b' -> out.append("\\b");
                case '\f' -> out.append("\\f");
                default -> {
                    if (c < 0x20 || c == 0x2028 || c == 0x2029) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }

    private static final class Reader {
        private final String s;
        private int pos;
        private int depth;

        Reader(String s) {
            this.s = s;
        }

        IllegalArgumentException error(String what) {
            return new IllegalArgumentException("invalid JSON at " + pos + ": " + what);
        }

        void space() {
            while (pos < s.length()) {
                char c = s.charAt(pos);
                if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                    pos++;
                } else {
                    return;
                }
            }
        }

        Object value() {
            if (pos >= s.length()) {
                throw error("unexpected end");
            }
            char c = s.charAt(pos);
            return switch (c) {
                case '{' -> object();
                case '[' -> array();
                case '"' -> string();
                case 't' -> word("true", Boolean.TRUE);
                case 'f' -> word("false", Boolean.FALSE);
                case 'n' -> word("null", null);
                default -> {
                    if (c == '-' || (c >= '0' && c <= '9')) {
                        yield number();
                    }
                    throw error("unexpected '" + c + "'");
                }
            };
        }

        private Object word(String w, Object v) {
            if (!s.startsWith(w, pos)) {
                throw error("expected " + w);
            }
            pos += w.length();
            return v;
        }

        private void enter() {
            if (++depth > 512) {
                throw error("nested too deep");
            }
        }

        private Map<String, Object> object() {
            enter();
            pos++; // {
            Map<String, Object> m = new LinkedHashMap<>();
            space();
            if (peek() == '}') {
                pos++;
                depth--;
                return m;
            }
            while (true) {
                space();
                if (peek() != '"') {
                    throw error("expected a key");
                }
                String key = string();
                space();
                if (peek() != ':') {
                    throw error("expected ':'");
                }
                pos++;
                space();
                m.put(key, value());
                space();
                char c = peek();
                pos++;
                if (c == '}') {
                    depth--;
                    return m;
                }
                if (c != ',') {
                    pos--;
                    throw error("expected ',' or '}'");
                }
            }
        }

        private List<Object> array() {
            enter();
            pos++; // [
            List<Object> list = new ArrayList<>();
            space();
            if (peek() == ']') {
                pos++;
                depth--;
                return list;
            }
            while (true) {
                space();
                list.add(value());
                space();
                char c = peek();
                pos++;
                if (c == ']') {
                    depth--;
                    return list;
                }
                if (c != ',') {
                    pos--;
                    throw error("expected ',' or ']'");
                }
            }
        }

        private char peek() {
            if (pos >= s.length()) {
                throw error("unexpected end");
            }
            return s.charAt(pos);
        }

        private String string() {
            pos++; // "
            StringBuilder b = null;
            int start = pos;
            while (true) {
                if (pos >= s.length()) {
                    throw error("unterminated string");
                }
                char c = s.charAt(pos);
                if (c == '"') {
                    String tail = s.substring(start, pos++);
                    return b == null ? tail : b.append(tail).toString();
                }
                if (c < 0x20) {
                    throw error("control character in a string");
                }
                if (c != '\\') {
                    pos++;
                    continue;
                }
                if (b == null) {
                    b = new StringBuilder();
                }
                b.append(s, start, pos);
                pos++;
                char e = peek();
                pos++;
                switch (e) {
                    case '"' -> b.append('"');
                    case '\\' -> b.append('\\');
                    case '/' -> b.append('/');
                    case 'b' -> b.append('\b');
                    case 'f' -> b.append('\f');
                    case 'n' -> b.append('\n');
                    case 'r' -> b.append('\r');
                    case 't' -> b.append('\t');
                    case 'u' -> {
                        if (pos + 4 > s.length()) {
                            throw error("short \\u escape");
                        }
                        try {
                            b.append((char) Integer.parseInt(s.substring(pos, pos + 4), 16));
                        } catch (NumberFormatException x) {
                            throw error("bad \\u escape");
                        }
                        pos += 4;
                    }
                    default -> throw error("bad escape \\" + e);
                }
                start = pos;
            }
        }

        private Object number() {
            int start = pos;
            if (s.charAt(pos) == '-') {
                pos++;
            }
            digits();
            boolean whole = true;
            if (pos < s.length() && s.charAt(pos) == '.') {
                whole = false;
                pos++;
                digits();
            }
            if (pos < s.length() && (s.charAt(pos) == 'e' || s.charAt(pos) == 'E')) {
                whole = false;
                pos++;
                if (pos < s.length() && (s.charAt(pos) == '+' || s.charAt(pos) == '-')) {
                    pos++;
                }
                digits();
            }
            String text = s.substring(start, pos);
            if (!whole) {
                return Double.parseDouble(text);
            }
            BigInteger big = new BigInteger(text);
            return big.bitLength() < 64 ? (Object) big.longValue() : big;
        }

        private void digits() {
            int start = pos;
            while (pos < s.length() && s.charAt(pos) >= '0' && s.charAt(pos) <= '9') {
                pos++;
            }
            if (pos == start) {
                throw error("expected a digit");
            }
        }
    }
}
