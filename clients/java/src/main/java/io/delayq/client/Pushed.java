package io.delayq.client;

/**
 * A pushed message.
 *
 * @param id the message's id (a 64-bit Snowflake as decimal text)
 * @param duplicate a live message of the topic held the bizKey: {@code id} is that message's,
 *     and nothing was pushed
 */
public record Pushed(String id, boolean duplicate) {}
