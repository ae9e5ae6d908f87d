//! Deserializing configs (and envelopes) without echoing values.
//!
//! serde's standard messages quote the offending value (`invalid type: string "whsec_…",
//! expected a sequence`), and configs hold secrets after `${VAR}` expansion. This module
//! deserializes through its own error type, which names what kind of value was found and
//! what was expected, and a key path from `serde_path_to_error`, never the value.

use serde::de::{
    self, DeserializeOwned, Deserializer, Expected, IntoDeserializer, Unexpected, Visitor,
    value::{MapAccessDeserializer, MapDeserializer, SeqDeserializer},
};
use serde_json::Value;
use std::fmt;

/// A deserialization error that never contains a value from the input.
#[derive(Debug)]
pub(crate) struct FieldError(String);

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FieldError {}

/// What kind of value was found, without the value.
fn kind(u: &Unexpected<'_>) -> &'static str {
    match u {
        Unexpected::Bool(_) => "a boolean",
        Unexpected::Unsigned(_) | Unexpected::Signed(_) => "an integer",
        Unexpected::Float(_) => "a float",
        Unexpected::Char(_) => "a character",
        Unexpected::Str(_) => "a string",
        Unexpected::Bytes(_) => "bytes",
        Unexpected::Unit => "null",
        Unexpected::Option => "an optional value",
        Unexpected::NewtypeStruct => "a newtype struct",
        Unexpected::Seq => "an array",
        Unexpected::Map => "a table",
        Unexpected::Enum => "an enum",
        Unexpected::UnitVariant
        | Unexpected::NewtypeVariant
        | Unexpected::TupleVariant
        | Unexpected::StructVariant => "an enum variant",
        Unexpected::Other(_) => "another kind of value",
    }
}

impl de::Error for FieldError {
    /// Messages from the adapters' own validation: they name fields, never values.
    fn custom<T: fmt::Display>(msg: T) -> Self {
        FieldError(msg.to_string())
    }

    fn invalid_type(unexp: Unexpected<'_>, exp: &dyn Expected) -> Self {
        FieldError(format!(
            "wrong type: expected {exp}, found {}",
            kind(&unexp)
        ))
    }

    fn invalid_value(unexp: Unexpected<'_>, exp: &dyn Expected) -> Self {
        FieldError(format!("invalid value ({}): expected {exp}", kind(&unexp)))
    }

    /// serde's wording; a table with a flattened part (an adapter's shared connection
    /// keys) does not know the keys it expected, and says only which key is unknown.
    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        if expected.is_empty() {
            FieldError(format!("unknown field `{field}`"))
        } else {
            FieldError(de::value::Error::unknown_field(field, expected).to_string())
        }
    }

    fn unknown_variant(_variant: &str, expected: &'static [&'static str]) -> Self {
        let list: Vec<String> = expected.iter().map(|v| format!("`{v}`")).collect();
        FieldError(format!(
            "unknown variant, expected one of {}",
            list.join(", ")
        ))
    }
}

/// A JSON value deserialized with [`FieldError`]s.
struct Scrub(Value);

impl<'de> IntoDeserializer<'de, FieldError> for Scrub {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

fn object(
    m: serde_json::Map<String, Value>,
) -> MapDeserializer<'static, impl Iterator<Item = (String, Scrub)>, FieldError> {
    MapDeserializer::new(m.into_iter().map(|(k, v)| (k, Scrub(v))))
}

impl<'de> Deserializer<'de> for Scrub {
    type Error = FieldError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FieldError> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_string(s),
            Value::Array(items) => {
                let mut seq = SeqDeserializer::new(items.into_iter().map(Scrub));
                let out = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(out)
            }
            Value::Object(m) => {
                let mut map = object(m);
                let out = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(out)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FieldError> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            other => visitor.visit_some(Scrub(other)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, FieldError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, FieldError> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(s.into_deserializer()),
            Value::Object(m) if m.len() == 1 => {
                visitor.visit_enum(MapAccessDeserializer::new(object(m)))
            }
            Value::Object(_) => Err(de::Error::invalid_value(
                Unexpected::Map,
                &"a table of one key",
            )),
            other => Err(de::Error::invalid_type(unexpected(&other), &"an enum")),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

fn unexpected(v: &Value) -> Unexpected<'static> {
    match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(_) => Unexpected::Bool(false),
        Value::Number(_) => Unexpected::Signed(0),
        Value::String(_) => Unexpected::Str(""),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

/// Deserialize `value` as `T`. The error names the key path (`sasl.password`,
/// `headers[2]`) and what was wrong, never a value from the input.
pub(crate) fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(Scrub(value)).map_err(|e| {
        let path = e.path().to_string();
        if path.is_empty() || path == "." {
            e.into_inner().0
        } else {
            format!("key `{path}`: {}", e.into_inner().0)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Sasl {
        password: String,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "snake_case")]
    #[allow(dead_code)]
    enum Mode {
        Fast,
        Slow,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Conf {
        secrets: Vec<String>,
        #[serde(default)]
        sasl: Option<Sasl>,
        #[serde(default)]
        mode: Option<Mode>,
        #[serde(default)]
        n: Option<u16>,
    }

    fn err(v: Value) -> String {
        from_value::<Conf>(v).unwrap_err()
    }

    #[test]
    fn wrong_types_name_the_key_not_the_value() {
        let e = err(serde_json::json!({"secrets": "whsec_SECRETVALUE"}));
        assert_eq!(
            e,
            "key `secrets`: wrong type: expected a sequence, found a string"
        );
        let e = err(serde_json::json!({"secrets": [], "sasl": {"password": 123456789}}));
        assert_eq!(
            e,
            "key `sasl.password`: wrong type: expected a string, found an integer"
        );
        assert!(!e.contains("123456789"));
        let e = err(serde_json::json!({"secrets": [7]}));
        assert_eq!(
            e,
            "key `secrets[0]`: wrong type: expected a string, found an integer"
        );
        let e = err(serde_json::json!({"secrets": [], "mode": "SECRETVALUE"}));
        assert!(
            e.starts_with("key `mode`: unknown variant, expected one of `fast`"),
            "{e}"
        );
        let e = err(serde_json::json!({"secrets": [], "n": 99_999_999}));
        assert!(e.starts_with("key `n`: invalid value (an integer)"), "{e}");
        assert!(!e.contains("99999999"), "{e}");
        let e = err(serde_json::json!({"secrets": [], "bogus": "SECRETVALUE"}));
        assert!(e.contains("unknown field `bogus`"), "{e}");
        assert!(err(serde_json::json!({})).contains("missing field `secrets`"));
    }

    #[test]
    fn good_values_deserialize() {
        let c: Conf = from_value(serde_json::json!({
            "secrets": ["a"], "sasl": {"password": "p"}, "mode": "slow", "n": 3
        }))
        .unwrap();
        assert_eq!(c.secrets, ["a"]);
        assert!(matches!(c.mode, Some(Mode::Slow)));
    }
}
