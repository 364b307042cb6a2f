//! The API's request and response bodies as types, for the OpenAPI
//! document ([`super::openapi`]): all of them are `delayq-proto`'s, the
//! wire the Rust client reads too, re-exported here for the handlers.
//!
//! Responses are these types: the handlers build them and serialize them,
//! so the document shows what is sent. Requests are read as bytes and
//! checked by hand (see `body.rs` and [`crate::message::parse_draft`]), for
//! error messages that name the field; their types here describe what the
//! handlers accept, with the same bounds, and are never built.

pub use delayq_proto::schema::{DeliveryInput, IdInput, RepeatRequest};
pub use delayq_proto::{
    AckAndGetRequest, AckAndPollReply, AckBatchReply, AckReply, AckRequest, AckResult,
    AssignmentReply, CancelEach, CancelOne, CancelReply, CancelRequest, ClusterReply, DeadMessage,
    DeadPage, DeleteNotFound, DuplicateUpdate, HealthReply, MessagePage, MessageReply,
    NackBatchReply, NackRequest, NackResult, PollReply, PrefixCounts, PushBatchReply,
    PushBatchRequest, PushReply, PushRequest, ReadyReply, RequeueOne, RequeueReply, RequeueResult,
    RequeueTopic, RescheduleEach, RescheduleOne, RescheduleReply, RescheduleRequest,
    RestoreOneReply, RestoreState, RetryRequest, ShardView,
};

/// What a topic looks like (the same rule as [`crate::message::valid_topic`]).
pub const TOPIC_PATTERN: &str = "^[A-Za-z0-9._:-]{1,128}$";
