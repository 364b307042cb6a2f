//! Dead letters as `GET /dead/{topic}` lists them, and the answers to
//! requeueing them.

use serde::{Deserialize, Serialize};

use crate::journal::HistoryEntry;
use crate::message::{MessageId, MessageView, Status};

/// A dead letter with its history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct DeadMessage {
    #[serde(flatten)]
    pub message: MessageView,
    pub history: Vec<HistoryEntry>,
}

/// `GET /dead/{topic}`: a page of dead letters in id order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct DeadPage {
    pub messages: Vec<DeadMessage>,
    /// The `after` of the next page; null on the last.
    pub next: Option<MessageId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RequeueResult {
    Requeued,
    NotDead,
    NotFound,
    /// A live message holds its bizKey now (`holder`).
    BizKeyTaken,
}

/// One dead message's requeue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RequeueOne {
    pub id: MessageId,
    pub result: RequeueResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<MessageId>,
}

/// `POST /dead/{topic}/requeue`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RequeueTopic {
    pub topic: String,
    pub requeued: usize,
    /// Dead messages left dead, with why.
    pub skipped: Vec<RequeueOne>,
    /// More dead messages are left after `limit`.
    pub more: bool,
}

/// `POST /dead/{target}/requeue`: one message, or a topic's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum RequeueReply {
    One(RequeueOne),
    Topic(RequeueTopic),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_requeue_reads_as_one_message_or_a_topic() {
        let sent = json!({"id": "5", "result": "biz_key_taken", "holder": "7"});
        let one: RequeueReply = serde_json::from_value(sent.clone()).unwrap();
        assert_eq!(
            one,
            RequeueReply::One(RequeueOne {
                id: MessageId(5),
                result: RequeueResult::BizKeyTaken,
                status: None,
                holder: Some(MessageId(7)),
            })
        );
        assert_eq!(serde_json::to_value(&one).unwrap(), sent);
        let topic: RequeueReply = serde_json::from_value(
            json!({"topic": "t", "requeued": 2, "skipped": [], "more": false}),
        )
        .unwrap();
        assert!(matches!(topic, RequeueReply::Topic(t) if t.requeued == 2 && !t.more));
    }
}
