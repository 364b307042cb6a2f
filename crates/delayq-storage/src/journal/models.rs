//! Rows of the journal: a read and an insert struct per table.

use diesel::prelude::*;

use crate::journal::schema::{message, message_flow};
use crate::message::{Message, MessageId, MessageView, Status};
use crate::repeat::Occurrence;

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = message)]
pub struct MessageRow {
    pub id: i64,
    pub topic: String,
    pub biz_key: Option<String>,
    pub live_biz_key: Option<String>,
    pub body: String,
    pub priority: i32,
    pub ttl: i64,
    pub delay_ms: i64,
    pub due_time: i64,
    pub create_time: i64,
    pub status: i16,
    pub attempts: i32,
    pub updated_time: i64,
    pub max_attempts: i32,
    pub retry: Option<String>,
    pub repeat_spec: Option<String>,
    pub occurrence: Option<i32>,
    pub occurrence_time: Option<i64>,
    pub msg_group: Option<String>,
}

impl MessageRow {
    pub fn status(&self) -> Status {
        Status::from_code(self.status).unwrap_or(Status::WaitPut)
    }

    pub fn message(&self) -> Message {
        Message {
            id: MessageId(self.id),
            topic: self.topic.clone(),
            biz_key: self.biz_key.clone(),
            group: self.msg_group.clone(),
            body: self.body.clone(),
            priority: self.priority.clamp(0, 255) as u8,
            ttl: self.ttl,
            delay: self.delay_ms,
            create_time: self.create_time,
            due_time: self.due_time,
            max_attempts: self.max_attempts,
            retry: self
                .retry
                .as_deref()
                .and_then(|r| serde_json::from_str(r).ok()),
            repeat: self
                .repeat_spec
                .as_deref()
                .and_then(|r| serde_json::from_str(r).ok()),
            occurrence: self.occurrence.map(|number| Occurrence {
                number,
                due_time: self.occurrence_time.unwrap_or(self.due_time),
            }),
        }
    }

    pub fn view(&self) -> MessageView {
        MessageView {
            receipt: None,
            message: self.message(),
            status: self.status(),
            attempts: self.attempts,
        }
    }
}

#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = message)]
pub struct NewMessage<'a> {
    pub id: i64,
    pub topic: &'a str,
    pub biz_key: Option<&'a str>,
    pub live_biz_key: Option<&'a str>,
    pub body: &'a str,
    pub priority: i32,
    pub ttl: i64,
    pub delay_ms: i64,
    pub due_time: i64,
    pub create_time: i64,
    pub status: i16,
    pub attempts: i32,
    pub updated_time: i64,
    pub max_attempts: i32,
    pub retry: Option<String>,
    pub repeat_spec: Option<String>,
    pub occurrence: Option<i32>,
    pub occurrence_time: Option<i64>,
    pub msg_group: Option<&'a str>,
}

impl<'a> NewMessage<'a> {
    pub fn waiting(m: &'a Message) -> Self {
        NewMessage {
            id: m.id.0,
            topic: &m.topic,
            biz_key: m.biz_key.as_deref(),
            live_biz_key: m.biz_key.as_deref(),
            body: &m.body,
            priority: m.priority as i32,
            ttl: m.ttl,
            delay_ms: m.delay,
            due_time: m.due_time,
            create_time: m.create_time,
            status: Status::WaitPut.code(),
            attempts: 0,
            updated_time: m.create_time,
            max_attempts: m.max_attempts,
            retry: m
                .retry
                .map(|r| serde_json::to_string(&r).expect("a policy always serializes")),
            repeat_spec: m
                .repeat
                .as_ref()
                .map(|r| serde_json::to_string(r).expect("a series always serializes")),
            occurrence: m.occurrence.map(|o| o.number),
            occurrence_time: m.occurrence.map(|o| o.due_time),
            msg_group: m.group.as_deref(),
        }
    }
}

#[derive(Debug, Clone, Queryable, Selectable, serde::Serialize)]
#[diesel(table_name = message_flow)]
#[serde(rename_all = "camelCase")]
pub struct FlowRow {
    #[serde(skip)]
    pub id: i64,
    #[serde(skip)]
    pub message_id: i64,
    #[serde(serialize_with = "status_name")]
    pub status: i16,
    pub attempts: i32,
    #[serde(rename = "time")]
    pub flow_time: i64,
    pub shard: String,
    pub node_id: String,
    pub host: String,
    /// The due time this change set (a reschedule, a retry's wait, a next
    /// occurrence); absent for other changes.
    #[serde(rename = "dueTime", skip_serializing_if = "Option::is_none")]
    pub due_time: Option<i64>,
}

impl FlowRow {
    /// The change as a message's history shows it.
    pub fn entry(&self) -> delayq_proto::HistoryEntry {
        delayq_proto::HistoryEntry {
            status: Status::from_code(self.status).unwrap_or(Status::Unknown),
            attempts: self.attempts,
            time: self.flow_time,
            shard: self.shard.clone(),
            node_id: self.node_id.clone(),
            host: self.host.clone(),
            due_time: self.due_time,
        }
    }
}

/// A flow row to insert; borrows its strings from the change and the node.
#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = message_flow)]
pub struct NewFlow<'a> {
    pub id: i64,
    pub message_id: i64,
    pub status: i16,
    pub attempts: i32,
    pub flow_time: i64,
    pub shard: &'a str,
    pub node_id: &'a str,
    pub host: &'a str,
    pub due_time: Option<i64>,
}

fn status_name<S: serde::Serializer>(code: &i16, s: S) -> Result<S::Ok, S::Error> {
    match Status::from_code(*code) {
        Some(st) => s.collect_str(&st),
        None => s.serialize_i16(*code),
    }
}
