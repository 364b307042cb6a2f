//! The journal's tables, written by hand with types every backend shares.

diesel::table! {
    message (id) {
        id -> BigInt,
        topic -> Varchar,
        biz_key -> Nullable<Varchar>,
        live_biz_key -> Nullable<Varchar>,
        body -> Text,
        priority -> Integer,
        ttl -> BigInt,
        delay_ms -> BigInt,
        due_time -> BigInt,
        create_time -> BigInt,
        status -> SmallInt,
        attempts -> Integer,
        updated_time -> BigInt,
        max_attempts -> Integer,
        retry -> Nullable<Varchar>,
        repeat_spec -> Nullable<Varchar>,
        occurrence -> Nullable<Integer>,
        occurrence_time -> Nullable<BigInt>,
        msg_group -> Nullable<Varchar>,
    }
}

diesel::table! {
    message_flow (id) {
        id -> BigInt,
        message_id -> BigInt,
        status -> SmallInt,
        attempts -> Integer,
        flow_time -> BigInt,
        shard -> Varchar,
        node_id -> Varchar,
        host -> Varchar,
        due_time -> Nullable<BigInt>,
    }
}

diesel::table! {
    message_waiting (due_time, id) {
        due_time -> BigInt,
        id -> BigInt,
    }
}

diesel::table! {
    outbox_done (source, row_id) {
        source -> Varchar,
        row_id -> BigInt,
        row_created -> BigInt,
        message_id -> BigInt,
        done_time -> BigInt,
    }
}

diesel::allow_tables_to_appear_in_same_query!(message, message_flow, message_waiting, outbox_done);
