//! OpenAPI schemas (the `utoipa` feature), for the server's
//! `/openapi.json`. The outcome enums list what the server sends, not
//! `Unknown`, and keep the names the document has always given them
//! (`AckResultKind`, `NackResultKind`, `CancelResult`).

use std::borrow::Cow;

use utoipa::openapi::schema::{
    KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type,
};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use crate::error::ErrorCode;
use crate::message::{MessageId, Status, ID_PATTERN};
use crate::outcome::{AckOutcome, CancelOutcome, NackOutcome};
use crate::reply::{DuplicateOutcome, RescheduleOutcome};

/// A string schema of these names.
fn names<'a>(names: impl IntoIterator<Item = &'a str>, description: Option<&str>) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(names))
        .description(description)
        .into()
}

impl PartialSchema for ErrorCode {
    fn schema() -> RefOr<Schema> {
        names(
            ErrorCode::ALL.iter().map(ErrorCode::as_str),
            Some("What went wrong, for a client to branch on"),
        )
    }
}

impl ToSchema for ErrorCode {}

impl PartialSchema for AckOutcome {
    fn schema() -> RefOr<Schema> {
        names(AckOutcome::SENT.iter().map(|o| o.as_str()), None)
    }
}

impl ToSchema for AckOutcome {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("AckResultKind")
    }
}

impl PartialSchema for NackOutcome {
    fn schema() -> RefOr<Schema> {
        names(NackOutcome::SENT.iter().map(|o| o.as_str()), None)
    }
}

impl ToSchema for NackOutcome {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("NackResultKind")
    }
}

impl PartialSchema for CancelOutcome {
    fn schema() -> RefOr<Schema> {
        names(
            CancelOutcome::SENT.iter().map(|o| o.as_str()),
            Some("What cancelling one message did."),
        )
    }
}

impl ToSchema for CancelOutcome {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("CancelResult")
    }
}

impl PartialSchema for Status {
    fn schema() -> RefOr<Schema> {
        names(
            Status::ALL.iter().map(|s| match s {
                Status::WaitPut => "WaitPut",
                Status::Delaying => "Delaying",
                Status::Ready => "Ready",
                Status::Consuming => "Consuming",
                Status::Consumed => "Consumed",
                Status::Deleted => "Deleted",
                Status::Dead => "Dead",
                Status::Unknown => "Unknown",
            }),
            Some("A message's place in its life, with the numeric code the journal stores."),
        )
    }
}

impl ToSchema for Status {}

impl PartialSchema for MessageId {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(ID_PATTERN))
            .description(Some(
                "A message id: a 64-bit Snowflake as a decimal string (1 to 9223372036854775807)",
            ))
            .examples(["382745980652486656"])
            .into()
    }
}

impl ToSchema for MessageId {}

impl PartialSchema for RescheduleOutcome {
    fn schema() -> RefOr<Schema> {
        names(
            RescheduleOutcome::SENT.iter().map(|o| o.as_str()),
            Some("What rescheduling one message did: `in_flight` is a message handed to a consumer, left alone."),
        )
    }
}

impl ToSchema for RescheduleOutcome {}

impl PartialSchema for DuplicateOutcome {
    fn schema() -> RefOr<Schema> {
        names(
            DuplicateOutcome::SENT.iter().map(|o| o.as_str()),
            Some("What a push with onDuplicate did to the live message holding its bizKey: `not_later` is an extend to a time not later than the message's, `in_flight` a message handed to a consumer, left alone."),
        )
    }
}

impl ToSchema for DuplicateOutcome {}

/// `repeat` as a push gives it: [`crate::Repeat`]'s schema, refusing
/// unknown fields (a reader of a message keeps taking a newer server's).
pub struct RepeatRequest;

impl PartialSchema for RepeatRequest {
    fn schema() -> RefOr<Schema> {
        let mut schema = crate::message::Repeat::schema();
        if let RefOr::T(Schema::Object(object)) = &mut schema {
            object.additional_properties = Some(Box::new(
                utoipa::openapi::schema::AdditionalProperties::FreeForm(false),
            ));
            object.description = Some(
                "A recurring message: `every` or `cron` (one of them), with `times` or `until` optional."
                    .into(),
            );
        }
        schema
    }
}

impl ToSchema for RepeatRequest {}

/// A message id in a batch request: the decimal string, or the number.
pub struct IdInput;

impl PartialSchema for IdInput {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(MessageId::schema())
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                    .minimum(Some(1)),
            )
            .into()
    }
}

impl ToSchema for IdInput {}

/// A delivery to ack or nack in a batch: the message's id (as
/// [`IdInput`]), or `{"id", "receipt"}` with the receipt it was handed out
/// with.
pub struct DeliveryInput;

impl PartialSchema for DeliveryInput {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(IdInput::schema())
            .item(
                ObjectBuilder::new()
                    .property("id", IdInput::schema())
                    .required("id")
                    .property(
                        "receipt",
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .pattern(Some("^[1-9][0-9]*-[0-9]+(-[1-9][0-9]*)?$")),
                    )
                    .additional_properties(Some(
                        utoipa::openapi::schema::AdditionalProperties::FreeForm(false),
                    )),
            )
            .into()
    }
}

impl ToSchema for DeliveryInput {}
