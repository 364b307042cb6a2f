//! Whether the database answers, and whether it takes a write.

use diesel::prelude::*;

use crate::error::JournalError;
use crate::journal::connection::JournalConn;
use crate::journal::models::NewFlow;
use crate::journal::schema::message_flow;
use crate::message::Status;
use crate::with_conn;

/// Does the database take a write? Inserts a flow row and rolls it back:
/// a database that refuses every write (read-only, out of space) fails
/// here, one that refuses only some rows (a constraint, a trigger) does not.
pub fn probe_write(conn: &mut JournalConn) -> Result<(), JournalError> {
    let probe = NewFlow {
        id: -1,
        message_id: -1,
        status: Status::WaitPut.code(),
        attempts: 0,
        flow_time: 0,
        shard: "probe",
        node_id: "probe",
        host: "probe",
        due_time: None,
    };
    let tried: Result<(), diesel::result::Error> = with_conn!(conn, c => c.transaction(|c| {
        diesel::insert_into(message_flow::table).values(&probe).execute(c)?;
        Err(diesel::result::Error::RollbackTransaction)
    }));
    match tried {
        Err(diesel::result::Error::RollbackTransaction) | Ok(()) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub fn ping(conn: &mut JournalConn) -> Result<(), JournalError> {
    use diesel::connection::SimpleConnection;
    Ok(with_conn!(conn, c => c.batch_execute("SELECT 1"))?)
}
