//! The journal spill list (`{P}:journal-spill`): status changes, one JSON
//! line each, that the journal did not take before a node stopped. These
//! are the list commands the node's spill and replay use.

use crate::redis::conn::Conn;

/// Appends `lines` to the list at `key`, `per_push` lines per RPUSH, in one
/// pipeline.
pub async fn push(
    con: &mut Conn,
    key: &str,
    lines: &[String],
    per_push: usize,
) -> redis::RedisResult<()> {
    let mut pipe = redis::pipe();
    for chunk in lines.chunks(per_push) {
        pipe.rpush(key, chunk).ignore();
    }
    pipe.query_async::<()>(con).await
}

/// How many lines the list at `key` holds (LLEN).
pub async fn len(con: &mut Conn, key: &str) -> redis::RedisResult<i64> {
    redis::cmd("LLEN").arg(key).query_async::<i64>(con).await
}

/// The first `count` lines of the list at `key` (LRANGE 0 count-1).
pub async fn first(con: &mut Conn, key: &str, count: isize) -> redis::RedisResult<Vec<String>> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(count - 1)
        .query_async(con)
        .await
}
