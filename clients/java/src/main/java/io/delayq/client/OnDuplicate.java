package io.delayq.client;

/**
 * What a push with a bizKey ({@link Message.Builder#onDuplicate(OnDuplicate)}) does to the live
 * message of its topic holding that key. {@link Pushed#result()} says what it did.
 */
public enum OnDuplicate {
    /** Nothing: the live message's id is answered, {@link Pushed#duplicate()} (the default). */
    KEEP("keep"),
    /**
     * Debounce: the live message takes the push's body, due time and priority, keeping its id; one
     * handed to a consumer already is left alone.
     */
    REPLACE("replace"),
    /** Only the live message's due time moves, and only later. */
    EXTEND("extend");

    private final String wire;

    OnDuplicate(String wire) {
        this.wire = wire;
    }

    /** The value sent: {@code keep}, {@code replace} or {@code extend}. */
    public String wire() {
        return wire;
    }
}
