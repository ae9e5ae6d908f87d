//! Keys of a flattened part of a config, named in errors.
//!
//! Serde's `flatten` drops the key path of an error inside the flattened struct: a bad
//! `sasl.password` would read "invalid type: ..." with no key. A connection config that a
//! sink's and a source's configs both flatten in (`#[serde(flatten)]`) derives
//! `Deserialize` with `#[serde(remote = "Self")]` and implements the real one with
//! [`keyed_flatten!`](crate::keyed_flatten), which tracks the path and names the key
//! (``key `sasl.password`: ...``) as errors of the rest of the table are named.

/// `e` with the key it happened at, ``key `<path>`: <e>``, unless the path is empty.
pub fn keyed<E: serde::de::Error>(track: serde_path_to_error::Track, e: E) -> E {
    let path = track.path().to_string();
    if path.is_empty() || path == "." {
        e
    } else {
        E::custom(format_args!("key `{path}`: {e}"))
    }
}

/// Implements `Deserialize` for a struct that configs flatten in, naming the key of an
/// error (see [`keyed`]). The struct derives `Deserialize` with
/// `#[serde(remote = "Self")]`, which makes the derived code an inherent
/// `deserialize` this impl wraps.
///
/// ```
/// #[derive(serde::Deserialize)]
/// #[serde(remote = "Self")]
/// struct Connection {
///     url: String,
///     timeout_ms: Option<u64>,
/// }
/// ankusa_sink_kit::keyed_flatten!(Connection);
///
/// #[derive(serde::Deserialize)]
/// struct SinkFile {
///     #[serde(flatten)]
///     conn: Connection,
///     topic: String,
/// }
///
/// let e = serde_json::from_str::<SinkFile>(r#"{"url": "x", "timeout_ms": "soon", "topic": "t"}"#)
///     .err()
///     .unwrap();
/// assert!(e.to_string().starts_with("key `timeout_ms`: "), "{e}");
/// ```
#[macro_export]
macro_rules! keyed_flatten {
    ($ty:ty) => {
        impl<'de> $crate::__serde::Deserialize<'de> for $ty {
            fn deserialize<D: $crate::__serde::Deserializer<'de>>(
                d: D,
            ) -> ::std::result::Result<Self, D::Error> {
                let mut track = $crate::__serde_path_to_error::Track::new();
                <$ty>::deserialize($crate::__serde_path_to_error::Deserializer::new(
                    d, &mut track,
                ))
                .map_err(|e| $crate::keyed(track, e))
            }
        }
    };
}
