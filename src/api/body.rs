//! Request bodies: JSON read with bounds before it is materialised.
//!
//! A body is at most [`MAX_REQUEST_BYTES`]; before it is parsed, one pass
//! over its bytes counts its JSON values, and a body holding more than
//! [`MAX_JSON_VALUES`] is refused. A parsed value costs tens of bytes per
//! element, so 15 MiB of `[0,0,0,…]` would otherwise take hundreds of MB to
//! refuse; no accepted request comes near the bound (a full batch of 1000
//! messages holds about 20 000 values).

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};
use serde_json::Value;

use crate::api::error::ApiError;
use crate::error::ErrorCode;

/// Largest request accepted: a full batch of maximal bodies would be far
/// more, so batches are bounded by this instead.
pub const MAX_REQUEST_BYTES: usize = 16 << 20;
/// Most JSON values (objects, arrays, strings, numbers, literals) a body
/// may hold.
pub const MAX_JSON_VALUES: usize = 100_000;

/// A JSON request body, parsed once it passed the bounds.
pub struct JsonBody(pub Value);

impl std::ops::Deref for JsonBody {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.0
    }
}

/// Counts the values of a JSON text without building them: every value
/// but the first follows a `,` or `:` or opens a container's first
/// element, so separators and openers outside strings bound the count.
pub fn json_values(bytes: &[u8]) -> usize {
    let (mut count, mut in_string, mut escaped) = (1usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b',' | b':' | b'[' | b'{' => count += 1,
            _ => {}
        }
    }
    count
}

fn is_json(req: &HttpRequest) -> bool {
    let mime = req.mime_type().ok().flatten();
    mime.is_some_and(|m| {
        m.type_().as_str() == "application"
            && (m.subtype().as_str() == "json" || m.suffix().is_some_and(|s| s.as_str() == "json"))
    })
}

impl FromRequest for JsonBody {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let json = is_json(req);
        let bytes = web::Bytes::from_request(req, payload);
        Box::pin(async move {
            if !json {
                return Err(ApiError::invalid(
                    ErrorCode::InvalidContentType,
                    "send the message as JSON with Content-Type: application/json",
                ));
            }
            let bytes = bytes.await.map_err(|e| {
                if e.as_response_error().status_code() == StatusCode::PAYLOAD_TOO_LARGE {
                    too_large()
                } else {
                    ApiError::invalid(
                        ErrorCode::InvalidJson,
                        format!("request body could not be read: {e}"),
                    )
                }
            })?;
            if bytes.len() > MAX_REQUEST_BYTES {
                return Err(too_large());
            }
            let values = json_values(&bytes);
            if values > MAX_JSON_VALUES {
                return Err(ApiError::TooLarge {
                    code: ErrorCode::PayloadTooLarge,
                    message: format!(
                        "request body holds more than {MAX_JSON_VALUES} JSON values ({values}); a batch holds at most 1000 messages"
                    ),
                });
            }
            parse_strict(&bytes).map(JsonBody).map_err(|e| {
                ApiError::invalid(
                    ErrorCode::InvalidJson,
                    format!("request body is not valid JSON: {e}"),
                )
            })
        })
    }
}

/// Parses a JSON text as serde_json does, but refuses an object that
/// names a key twice: JSON leaves it undefined, and "the last one wins"
/// would quietly drop what a client sent (`{"delay": 0, "delay": 60000}`).
pub fn parse_strict(bytes: &[u8]) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde::de::DeserializeSeed::deserialize(Strict, &mut de)?;
    de.end()?;
    Ok(value)
}

/// Builds a [`Value`], refusing a repeated key in any object.
struct Strict;

impl<'de> serde::de::DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut list = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(v) = seq.next_element_seed(Strict)? {
            list.push(v);
        }
        Ok(Value::Array(list))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "key {key:?} is given twice in one object"
                )));
            }
            let value = map.next_value_seed(Strict)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

fn too_large() -> ApiError {
    ApiError::TooLarge {
        code: ErrorCode::PayloadTooLarge,
        message: format!("request body is over {MAX_REQUEST_BYTES} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_values_outside_strings() {
        assert_eq!(json_values(b"1"), 1);
        assert_eq!(json_values(b"[0,0,0]"), 4);
        assert_eq!(json_values(br#"{"a":[1,2],"b":"x,y:[{"}"#), 7);
        assert_eq!(json_values(br#"["a\",b", 1]"#), 3);
        for v in [
            serde_json::json!({"messages": [{"topic": "t", "body": "x", "retry": {"delay": 5}}]}),
            serde_json::json!([[], {}, "", 0, null, true]),
        ] {
            let text = v.to_string();
            assert!(json_values(text.as_bytes()) >= count(&v), "{text}");
        }
    }

    #[test]
    fn strict_parsing_is_serde_jsons_without_repeated_keys() {
        for text in [
            r#"{"a": [1, -2, 3.5, 1e300, 18446744073709551615], "b": {"c": null, "d": "\u00e9"}}"#,
            r#"[true, false, "", {}]"#,
            "12",
        ] {
            let strict = parse_strict(text.as_bytes()).unwrap();
            assert_eq!(
                strict,
                serde_json::from_str::<Value>(text).unwrap(),
                "{text}"
            );
        }
        for text in [r#"{"a": 1, "a": 2}"#, r#"[{"b": {"c": 1, "c": 1}}]"#] {
            let e = parse_strict(text.as_bytes()).unwrap_err().to_string();
            assert!(e.contains("given twice"), "{text}: {e}");
        }
        assert!(parse_strict(b"{} x").is_err());
    }

    fn count(v: &Value) -> usize {
        1 + match v {
            Value::Array(a) => a.iter().map(count).sum(),
            Value::Object(o) => o.values().map(count).sum(),
            _ => 0,
        }
    }
}
