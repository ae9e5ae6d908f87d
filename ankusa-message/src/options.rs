//! [`MessageOptions`]: the message keys of a sink file, declared once for every adapter.

use crate::cloudevents::{CloudEvents, Format, Mode, TypeError};
use crate::message::DEFAULT_INLINE_MAX_BYTES;
use crate::outgoing::{EmptyValues, Layout};
use crate::signing::Signer;
use ankusa_sink_core::Payload;
use serde::Deserialize;
use std::num::NonZeroUsize;

/// What a sink sends and how, as a sink file says it: `format`, `cloudevents_type`, the
/// `[signing]` table and `inline_max_bytes`.
///
/// Every adapter's config takes it flattened (`#[serde(flatten)]`), so the keys sit at the
/// top of the sink's table as they always did:
///
/// ```toml
/// format = "cloudevents"                  # or "cloudevents-structured"; "message-v1" (alias "message") is the default
/// cloudevents_type = "com.example.hook"   # default ankusa.hook.received
/// inline_max_bytes = 65536                # larger bodies travel by claim (Message v1)
/// [signing]
/// secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
/// ```
///
/// Values are checked when the file is read (an event type with whitespace, a secret that
/// cannot sign). Which options an adapter honours is stated once, in the sink registry
/// (`ankusa-sinks`), which refuses the others; [`MessageOption`] names them.
/// [`layout`](Self::layout) turns the options into the [`Layout`] a sink sends with.
/// `Debug` shows how many signing keys there are, never a secret.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(try_from = "Keys")]
#[non_exhaustive]
pub struct MessageOptions {
    format: Option<Format>,
    cloudevents: Option<CloudEvents>,
    signing: Option<Signer>,
    inline_max_bytes: Option<NonZeroUsize>,
    /// Whether `cloudevents_type` was written: an adapter without CloudEvents refuses it
    /// even without `format`. Not part of equality (the event type is, in `cloudevents`).
    type_key: bool,
}

impl PartialEq for MessageOptions {
    fn eq(&self, other: &Self) -> bool {
        self.format == other.format
            && self.cloudevents == other.cloudevents
            && self.signing == other.signing
            && self.inline_max_bytes == other.inline_max_bytes
    }
}

impl Eq for MessageOptions {}

/// The keys exactly as written.
#[derive(Deserialize)]
struct Keys {
    format: Option<Format>,
    cloudevents_type: Option<String>,
    signing: Option<Signer>,
    inline_max_bytes: Option<usize>,
}

/// Why the message keys of a sink file were refused (the text names the key, never a
/// value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionsError {
    /// `cloudevents_type` cannot name an event type.
    #[error(transparent)]
    CloudEventsType(#[from] TypeError),
    /// `inline_max_bytes = 0`.
    #[error("inline_max_bytes must be positive")]
    ZeroInlineMaxBytes,
}

impl TryFrom<Keys> for MessageOptions {
    type Error = OptionsError;

    fn try_from(k: Keys) -> Result<Self, OptionsError> {
        let cloudevents =
            CloudEvents::from_keys(k.format.unwrap_or_default(), k.cloudevents_type.as_deref())?;
        let inline_max_bytes = match k.inline_max_bytes {
            None => None,
            Some(n) => Some(NonZeroUsize::new(n).ok_or(OptionsError::ZeroInlineMaxBytes)?),
        };
        Ok(MessageOptions {
            format: k.format,
            cloudevents,
            signing: k.signing,
            inline_max_bytes,
            type_key: k.cloudevents_type.is_some(),
        })
    }
}

impl MessageOptions {
    /// Message v1, unsigned, the default inline threshold.
    pub fn new() -> Self {
        MessageOptions::default()
    }

    /// Send CloudEvents (`format` and `cloudevents_type`), or Message v1 again with `None`.
    pub fn with_cloudevents(mut self, events: Option<CloudEvents>) -> Self {
        self.format = events.as_ref().map(|e| match e.mode() {
            Mode::Binary => Format::CloudEvents,
            Mode::Structured => Format::CloudEventsStructured,
        });
        self.cloudevents = events;
        self.type_key = false;
        self
    }

    /// The `format` and `cloudevents_type` keys: `event_type` `None` is
    /// `ankusa.hook.received`, and ignored for [`Format::MessageV1`].
    ///
    /// # Errors
    /// [`TypeError`] for an event type CloudEvents cannot carry.
    pub fn with_format(
        mut self,
        format: Format,
        event_type: Option<&str>,
    ) -> Result<Self, TypeError> {
        self.cloudevents = CloudEvents::from_keys(format, event_type)?;
        self.format = Some(format);
        self.type_key = event_type.is_some();
        Ok(self)
    }

    /// Sign every message with `signer` (the `[signing]` table).
    pub fn with_signing(mut self, signer: Signer) -> Self {
        self.signing = Some(signer);
        self
    }

    /// Send Message v1 bodies over `max` bytes by claim (`inline_max_bytes`).
    pub fn with_inline_max_bytes(mut self, max: NonZeroUsize) -> Self {
        self.inline_max_bytes = Some(max);
        self
    }

    /// The `format` key as written (`None` when absent).
    pub fn format(&self) -> Option<Format> {
        self.format
    }

    /// The CloudEvents to send instead of Message v1, if any.
    pub fn cloudevents(&self) -> Option<&CloudEvents> {
        self.cloudevents.as_ref()
    }

    /// The signer of the `[signing]` table, if any.
    pub fn signing(&self) -> Option<&Signer> {
        self.signing.as_ref()
    }

    /// The inline threshold: `inline_max_bytes`, else [`DEFAULT_INLINE_MAX_BYTES`] (64 KiB).
    pub fn inline_max_bytes(&self) -> NonZeroUsize {
        self.inline_max_bytes.unwrap_or(DEFAULT_INLINE_MAX_BYTES)
    }

    /// Whether `option` was set (in the file or by a `with_*` method).
    pub fn is_set(&self, option: MessageOption) -> bool {
        self.key_set(option).is_some()
    }

    /// The sink-file key that set `option`, if one did (`format`, else `cloudevents_type`
    /// for [`MessageOption::Format`]): for an adapter that refuses what it cannot honour,
    /// naming the key as written.
    pub fn key_set(&self, option: MessageOption) -> Option<&'static str> {
        let set = match option {
            MessageOption::Format if self.format.is_none() && self.type_key => {
                return Some("cloudevents_type");
            }
            MessageOption::Format => self.format.is_some(),
            MessageOption::Signing => self.signing.is_some(),
            MessageOption::InlineMaxBytes => self.inline_max_bytes.is_some(),
        };
        set.then(|| option.key())
    }

    /// The layout these options ask for: `payload` [`Payload::Message`] is Message v1 under
    /// [`inline_max_bytes`](Self::inline_max_bytes), [`Payload::Body`] the raw body; either
    /// way CloudEvents replace it when `format` says so, and the signer signs whatever is
    /// sent. Add a key template with [`Layout::with_key`].
    pub fn layout(&self, payload: Payload, empty: EmptyValues) -> Layout {
        let layout = match payload {
            Payload::Body => Layout::raw_body(empty),
            Payload::Message | Payload::CloudEvent => {
                Layout::message(Some(self.inline_max_bytes()), empty)
            }
        };
        layout
            .with_signer(self.signing.clone())
            .with_cloudevents(self.cloudevents.clone())
    }
}

/// One option of [`MessageOptions`], by its sink-file key (`cloudevents_type` goes with
/// `format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MessageOption {
    /// `format` and `cloudevents_type`.
    Format,
    /// The `[signing]` table.
    Signing,
    /// `inline_max_bytes`.
    InlineMaxBytes,
}

impl MessageOption {
    /// Every option.
    pub const ALL: [MessageOption; 3] = [
        MessageOption::Format,
        MessageOption::Signing,
        MessageOption::InlineMaxBytes,
    ];

    /// The option a sink-file key sets, if it is one of these.
    pub fn of_key(key: &str) -> Option<MessageOption> {
        match key {
            "format" | "cloudevents_type" => Some(MessageOption::Format),
            "signing" => Some(MessageOption::Signing),
            "inline_max_bytes" => Some(MessageOption::InlineMaxBytes),
            _ => None,
        }
    }

    /// The option's sink-file key.
    pub const fn key(self) -> &'static str {
        match self {
            MessageOption::Format => "format",
            MessageOption::Signing => "signing",
            MessageOption::InlineMaxBytes => "inline_max_bytes",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::{Ctx, Envelope};

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    /// The options flattened into an adapter's keys, as every adapter takes them.
    #[derive(Debug, Deserialize)]
    struct Adapter {
        #[allow(dead_code)]
        topic: String,
        #[serde(flatten)]
        message: MessageOptions,
    }

    fn parse(text: &str) -> Result<MessageOptions, toml::de::Error> {
        toml::from_str::<Adapter>(text).map(|a| a.message)
    }

    #[test]
    fn keys_read_flattened_as_sink_files_write_them() {
        let none = parse("topic = \"t\"").unwrap();
        assert_eq!(none, MessageOptions::new());
        assert_eq!(none.inline_max_bytes(), DEFAULT_INLINE_MAX_BYTES);
        assert!(MessageOption::ALL.iter().all(|o| !none.is_set(*o)));

        let all = parse(&format!(
            "topic = \"t\"\nformat = \"cloudevents-structured\"\ncloudevents_type = \"com.x\"\n\
             inline_max_bytes = 1024\n[signing]\nsecrets = [\"{SECRET}\"]"
        ))
        .unwrap();
        assert_eq!(all.format(), Some(Format::CloudEventsStructured));
        let ce = all.cloudevents().unwrap();
        assert_eq!((ce.mode(), ce.event_type()), (Mode::Structured, "com.x"));
        assert_eq!(all.signing().map(Signer::len), Some(1));
        assert_eq!(all.inline_max_bytes().get(), 1024);
        assert!(MessageOption::ALL.iter().all(|o| all.is_set(*o)));
        assert!(!format!("{all:?}").contains("MfKQ9r8"));

        let only_type = parse("topic = \"t\"\ncloudevents_type = \"com.x\"").unwrap();
        assert_eq!(
            only_type.key_set(MessageOption::Format),
            Some("cloudevents_type")
        );
        assert_eq!(all.key_set(MessageOption::Format), Some("format"));
        for text in ["format = \"message-v1\"", "format = \"message\""] {
            let m = parse(&format!("topic = \"t\"\n{text}")).unwrap();
            assert_eq!(m.format(), Some(Format::MessageV1), "{text}");
            assert!(m.cloudevents().is_none());
        }
    }

    #[test]
    fn bad_values_are_refused_when_read() {
        let e = parse("topic = \"t\"\nformat = \"cloudevents\"\ncloudevents_type = \"a b\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cloudevents_type must be"), "{e}");
        let e = parse("topic = \"t\"\ninline_max_bytes = 0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("inline_max_bytes must be positive"), "{e}");
        let e = parse("topic = \"t\"\nformat = \"xml\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("xml"), "{e}");
        let e = parse("topic = \"t\"\n[signing]\nsecrets = [\"short\"]")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("short\""), "{e}");
    }

    #[test]
    fn builders_match_the_keys() {
        let signer = Signer::new([SECRET]).unwrap();
        let built = MessageOptions::new()
            .with_format(Format::CloudEvents, Some("com.x"))
            .unwrap()
            .with_signing(signer)
            .with_inline_max_bytes(NonZeroUsize::new(1024).unwrap());
        let read = parse(&format!(
            "topic = \"t\"\nformat = \"cloudevents\"\ncloudevents_type = \"com.x\"\n\
             inline_max_bytes = 1024\n[signing]\nsecrets = [\"{SECRET}\"]"
        ))
        .unwrap();
        assert_eq!(built, read);
        let again = MessageOptions::new().with_cloudevents(built.cloudevents().cloned());
        assert_eq!(again.format(), Some(Format::CloudEvents));
        assert!(
            MessageOptions::new()
                .with_format(Format::CloudEvents, Some(""))
                .is_err()
        );
    }

    #[test]
    fn the_layout_carries_every_option() {
        let env = Envelope::builder("h", "s", &b"{}"[..]).build().unwrap();
        let ctx = Ctx::for_envelope(&env);
        let plain = MessageOptions::new().layout(Payload::Message, EmptyValues::Drop);
        assert_eq!(
            plain,
            Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Drop)
        );
        let signed = MessageOptions::new().with_signing(Signer::new([SECRET]).unwrap());
        for payload in [Payload::Message, Payload::Body] {
            let layout = signed.layout(payload, EmptyValues::Drop);
            let out = crate::Outgoing::new(&env, &ctx, &layout).unwrap();
            assert!(
                out.get(crate::Attr::WebhookSignature).is_some(),
                "{payload:?}"
            );
        }
        let ce = MessageOptions::new()
            .with_format(Format::CloudEvents, None)
            .unwrap()
            .layout(Payload::Message, EmptyValues::Drop);
        assert_eq!(ce.payload(), Payload::CloudEvent);
        assert_eq!(ce.inline_max_bytes(), None);
    }

    #[test]
    fn keys_name_their_option() {
        for o in MessageOption::ALL {
            assert_eq!(MessageOption::of_key(o.key()), Some(o));
        }
        assert_eq!(
            MessageOption::of_key("cloudevents_type"),
            Some(MessageOption::Format)
        );
        assert_eq!(MessageOption::of_key("topic"), None);
    }
}
