//! A poison table (issue 60): rows of one value put in one field of an otherwise healthy
//! hook, each delivered to a real destination through one sink, and what must happen to
//! it. [`run`] builds each row's hook (a row the envelope builder must refuse stops there),
//! delivers it, checks that a refusal is permanent, names the field and never shows the
//! value, lets the adapter read back what went ([`Step`]), and then delivers a healthy hook
//! on the same sink, which must succeed: one poison hook costs nothing but itself.
//! [`mixed_run`] delivers many hooks at once with one poison hook among them.
//!
//! ```
//! use ankusa_sink_testkit::support::poison::{Field, Parts, Row, Want, dedupe, replay};
//!
//! let rows = [
//!     dedupe("evt\u{FFFF}x", Want::Refused("subject")),
//!     replay("r\r\nX-Evil: 1", Want::Delivered),
//!     dedupe("evt\0", Want::Unbuildable),
//! ];
//! assert_eq!(rows[0].field, Field::Dedupe);
//! assert!(rows[2].hook(Parts::new("h1")).is_err());
//! let (env, ctx) = rows[1].hook(Parts::keyed("h2")).unwrap();
//! assert_eq!((env.dedupe_key(), ctx.replay_id.as_deref()), (Some("evt-h2"), Some("r\r\nX-Evil: 1")));
//! ```

use super::unique_name;
use ankusa_sink_core::{Class, Ctx, Envelope, EnvelopeError, Failure, Sink};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Beyond ASCII, as a destination that carries any UTF-8 must take it: a Latin letter, an
/// emoji, the replacement character, and noncharacters (U+FFFF, U+FFFE, U+FDD0, U+10FFFF),
/// which some protocols refuse (MQTT, XML) and others must not.
pub const UNICODE: &[&str] = &[
    "é",
    "😀",
    "\u{FFFD}",
    "\u{FFFF}",
    "\u{FFFE}",
    "\u{FDD0}",
    "\u{10FFFF}",
];

/// A hook built around a value, or the envelope builder's refusal of it.
pub type Hook = Result<(Envelope, Ctx), EnvelopeError>;

/// A hook before it is built: the parts a row may change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parts {
    /// The hook id.
    pub id: String,
    /// The source id.
    pub source: String,
    /// The tenant id.
    pub tenant: Option<String>,
    /// The content type.
    pub content_type: Option<String>,
    /// The dedupe key.
    pub dedupe: Option<String>,
    /// Forwarded headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// The ctx's replay id.
    pub replay: Option<String>,
    /// The ctx's batch flag.
    pub batch: bool,
}

impl Parts {
    /// A healthy hook: `id`, source `stripe`, tenant `acme`, `application/json`, the body
    /// `{"ok":true}`, no dedupe key, no headers, no replay id.
    pub fn new(id: &str) -> Self {
        Parts {
            id: id.to_owned(),
            source: "stripe".to_owned(),
            tenant: Some("acme".to_owned()),
            content_type: Some("application/json".to_owned()),
            dedupe: None,
            headers: Vec::new(),
            body: br#"{"ok":true}"#.to_vec(),
            replay: None,
            batch: false,
        }
    }

    /// [`new`](Self::new) with the dedupe key `evt-<id>`: for a sink whose topic, subject
    /// or routing key is rendered from `{dedupe_key}`.
    pub fn keyed(id: &str) -> Self {
        Parts {
            dedupe: Some(format!("evt-{id}")),
            ..Parts::new(id)
        }
    }

    /// The envelope, and a ctx for it with the replay id and batch flag.
    pub fn build(self) -> Hook {
        let mut b = Envelope::builder(self.id, self.source, self.body)
            .tenant(self.tenant)
            .headers(self.headers);
        if let Some(ct) = self.content_type {
            b = b.content_type(ct);
        }
        if let Some(key) = self.dedupe {
            b = b.dedupe_key(key);
        }
        let env = b.build()?;
        let mut ctx = Ctx::for_envelope(&env).with_batch(self.batch);
        if let Some(replay) = self.replay {
            ctx = ctx.with_replay_id(replay);
        }
        Ok((env, ctx))
    }
}

/// Where a row puts its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The hook id (the whole id is the value).
    Id,
    /// The source id.
    Source,
    /// The dedupe key.
    Dedupe,
    /// The content type.
    ContentType,
    /// A forwarded header of this name.
    Header(&'static str),
    /// The ctx's replay id (no envelope rule applies to it).
    Replay,
    /// Somewhere else, as [`Row::custom`] sets it; the name is the row's.
    Other(&'static str),
}

impl fmt::Display for Field {
    /// `dedupe key`, `header X-Poison`, ...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Id => f.write_str("id"),
            Field::Source => f.write_str("source id"),
            Field::Dedupe => f.write_str("dedupe key"),
            Field::ContentType => f.write_str("content type"),
            Field::Header(name) => write!(f, "header {name}"),
            Field::Replay => f.write_str("replay id"),
            Field::Other(name) => f.write_str(name),
        }
    }
}

/// What must happen to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Delivered (the adapter's [`Step`] reads it back).
    Delivered,
    /// Permanent, not sent, the reason naming this field (`"subject"`, `"header \"x\""`).
    Refused(&'static str),
    /// The envelope builder refuses it first: no sink ever sees such a hook.
    Unbuildable,
}

/// One row: a value, where it goes, what must happen.
#[derive(Clone)]
pub struct Row {
    /// Where the value goes.
    pub field: Field,
    /// The value.
    pub value: String,
    /// What must happen.
    pub want: Want,
    set: fn(&mut Parts, &str),
}

impl Row {
    /// `value` in `field` (for [`Field::Other`], use [`custom`](Self::custom)).
    pub fn new(field: Field, value: impl Into<String>, want: Want) -> Self {
        let set: fn(&mut Parts, &str) = match field {
            Field::Id => |p, v| p.id = v.to_owned(),
            Field::Source => |p, v| p.source = v.to_owned(),
            Field::Dedupe => |p, v| p.dedupe = Some(v.to_owned()),
            Field::ContentType => |p, v| p.content_type = Some(v.to_owned()),
            Field::Header(_) => |_, _| (),
            Field::Replay => |p, v| p.replay = Some(v.to_owned()),
            Field::Other(name) => panic!("Row::new(Other({name:?})): use Row::custom"),
        };
        Row {
            field,
            value: value.into(),
            want,
            set,
        }
    }

    /// `value` put in a hook by `set`, shown as `name`: `|p, v| p.id = format!("{}-{v}",
    /// p.id)`, say.
    pub fn custom(
        name: &'static str,
        value: impl Into<String>,
        want: Want,
        set: fn(&mut Parts, &str),
    ) -> Self {
        Row {
            field: Field::Other(name),
            value: value.into(),
            want,
            set,
        }
    }

    /// The row's hook around `base`.
    pub fn hook(&self, mut base: Parts) -> Hook {
        if let Field::Header(name) = self.field {
            base.headers.push((name.to_owned(), self.value.clone()));
        }
        (self.set)(&mut base, &self.value);
        base.build()
    }
}

impl fmt::Display for Row {
    /// The field and the value's first 40 characters, as in failure messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head: String = self.value.chars().take(40).collect();
        write!(f, "{} {head:?}", self.field)?;
        if head.len() < self.value.len() {
            write!(f, "... ({} bytes)", self.value.len())?;
        }
        Ok(())
    }
}

impl fmt::Debug for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self} => {:?}", self.want)
    }
}

/// `value` as the hook id.
pub fn id(value: impl Into<String>, want: Want) -> Row {
    Row::new(Field::Id, value, want)
}

/// `value` as the source id.
pub fn source(value: impl Into<String>, want: Want) -> Row {
    Row::new(Field::Source, value, want)
}

/// `value` as the dedupe key.
pub fn dedupe(value: impl Into<String>, want: Want) -> Row {
    Row::new(Field::Dedupe, value, want)
}

/// `value` as the content type.
pub fn content_type(value: impl Into<String>, want: Want) -> Row {
    Row::new(Field::ContentType, value, want)
}

/// `value` in the forwarded header `name`.
pub fn header(name: &'static str, value: impl Into<String>, want: Want) -> Row {
    Row::new(Field::Header(name), value, want)
}

/// `value` as the ctx's replay id.
pub fn replay(value: impl Into<String>, want: Want) -> Row {
    Row::new(Field::Replay, value, want)
}

/// One row after its delivery, for the adapter to read back what went (or check that
/// nothing did).
#[derive(Debug)]
pub struct Step<'a> {
    /// The row.
    pub row: &'a Row,
    /// Its envelope.
    pub env: &'a Envelope,
    /// Its ctx.
    pub ctx: &'a Ctx,
    /// The refusal of a [`Want::Refused`] row (already checked); `None`: delivered.
    pub refused: Option<&'a Failure>,
    /// How many deliveries of this run succeeded so far, this one included.
    pub sent: usize,
}

/// A hook [`run`] delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// Its id.
    pub id: String,
    /// The row's value; `None` for a healthy hook.
    pub value: Option<String>,
}

/// Every row of `rows` through the sink `sink_for` picks for it, in order; returns what was
/// delivered, in order. Each row's hook is built around `base` ([`Parts::new`] or
/// [`Parts::keyed`]) with an id unique to this run:
///
/// - [`Want::Unbuildable`]: the envelope builder must refuse it, without showing the value;
///   nothing more.
/// - [`Want::Delivered`]: `deliver` returns `Ok`.
/// - [`Want::Refused`]: `deliver` fails [`Class::Permanent`], not landed, the reason
///   naming the field and not showing the value ([`assert_refused`]).
///
/// Then `probe` sees the [`Step`], and a healthy hook (`base` as it is) is delivered on the
/// same sink and must succeed. Every delivery must answer within 60 s.
pub async fn run<'s, S: Sink + ?Sized + 's>(
    rows: &[Row],
    base: fn(&str) -> Parts,
    sink_for: impl Fn(&Row) -> &'s S,
    mut probe: impl AsyncFnMut(Step<'_>),
) -> Vec<Sent> {
    let run = unique_name("poison");
    let mut sent = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let sink = sink_for(row);
        let (env, ctx) = match (row.hook(base(&format!("{run}-p{i}"))), row.want) {
            (Err(e), Want::Unbuildable) => {
                assert_absent(&row.to_string(), &e.to_string(), &row.value);
                continue;
            }
            (Err(e), _) => panic!("{row}: the envelope builder refused it: {e}"),
            (Ok(_), Want::Unbuildable) => panic!("{row}: the envelope builder took it"),
            (Ok(hook), _) => hook,
        };
        let res = bounded(row, sink.deliver(&env, &ctx)).await;
        let refused = match (row.want, &res) {
            (Want::Refused(field), Err(f)) => {
                assert_refused(&row.to_string(), f, field, &row.value);
                Some(f)
            }
            (Want::Refused(_), Ok(())) => panic!("{row}: delivered, but must be refused"),
            (_, Err(f)) => panic!("{row}: refused: {f}"),
            (_, Ok(())) => {
                let (id, value) = (env.id().to_owned(), Some(row.value.clone()));
                sent.push(Sent { id, value });
                None
            }
        };
        let step = Step {
            row,
            env: &env,
            ctx: &ctx,
            refused,
            sent: sent.len(),
        };
        probe(step).await;
        // The same sink, the same connection: the next hook goes.
        let (healthy, ctx) = base(&format!("{run}-h{i}"))
            .build()
            .expect("a healthy hook");
        bounded(row, sink.deliver(&healthy, &ctx))
            .await
            .unwrap_or_else(|f| panic!("the healthy hook after {row}: {f}"));
        let id = healthy.id().to_owned();
        sent.push(Sent { id, value: None });
    }
    sent
}

/// [`run`] on one sink, around [`Parts::new`], with no read-back of its own.
pub async fn run_on<S: Sink + ?Sized>(rows: &[Row], sink: &S) -> Vec<Sent> {
    run(rows, Parts::new, |_| sink, async |_| ()).await
}

async fn bounded<T>(row: &Row, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .unwrap_or_else(|_| panic!("{row}: no answer within 60 s: the sink hangs"))
}

/// A poison hook's refusal: [`Class::Permanent`], not landed (`may_have_landed` is
/// `Some(false)`), the reason containing `field` and not showing `value`
/// ([`assert_absent`]). `shown` names the row in a failed assertion.
pub fn assert_refused(shown: &str, f: &Failure, field: &str, value: &str) {
    assert_eq!(f.class(), Class::Permanent, "{shown}: {f}");
    assert_eq!(f.may_have_landed(), Some(false), "{shown}: {f}");
    let reason = f.to_string();
    assert!(reason.contains(field), "{shown}: {field:?} not in {reason}");
    assert_absent(shown, &reason, value);
}

/// `text` (a refusal's reason) does not show `value`: it is printable ASCII (so no
/// noncharacter, control or non-ASCII character of a value is in it), and holds not the
/// value's first 8 characters, when the value has 3 or more (shorter is too generic to
/// mean anything: `#` is in many a reason).
pub fn assert_absent(shown: &str, text: &str, value: &str) {
    assert!(
        text.chars().all(|c| c == ' ' || c.is_ascii_graphic()),
        "{shown}: not printable ASCII: {text:?}"
    );
    let head: String = value.chars().take(8).collect();
    assert!(
        head.chars().count() < 3 || !text.contains(&head),
        "{shown}: the value shows: {text}"
    );
}

/// `n` hooks for a mixed run: hook `i` is [`Parts::new`] with the id `<label>-<i>` and the
/// dedupe key `evt-<i>`, then changed by `each(i, parts)` (the poison one, `batch`, ...).
pub fn hooks(label: &str, n: usize, each: impl Fn(usize, &mut Parts)) -> Vec<(Envelope, Ctx)> {
    (0..n)
        .map(|i| {
            let mut parts = Parts::new(&format!("{label}-{i}"));
            parts.dedupe = Some(format!("evt-{i}"));
            each(i, &mut parts);
            parts.build().expect("a mixed run's hook")
        })
        .collect()
}

/// The poison hook of a [`mixed_run`], and what its refusal must say.
#[derive(Debug, Clone, Copy)]
pub struct Poison<'a> {
    /// Its index among the hooks.
    pub index: usize,
    /// What the reason must contain.
    pub field: &'a str,
    /// The poison value, which the reason must not show.
    pub value: &'a str,
}

/// Deliver every hook at once, each on a task of its own on one sink, and assert that the
/// poison hook alone failed ([`assert_refused`]; with `None`, that none failed). Returns
/// the indices delivered, in order, for the adapter to read back.
pub async fn mixed_run<S: Sink + ?Sized + 'static>(
    sink: &Arc<S>,
    hooks: Vec<(Envelope, Ctx)>,
    poison: Option<Poison<'_>>,
) -> Vec<usize> {
    let n = hooks.len();
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (i, (env, ctx)) in hooks.into_iter().enumerate() {
        let sink = Arc::clone(sink);
        set.spawn(async move {
            let res = tokio::time::timeout(Duration::from_secs(60), sink.deliver(&env, &ctx));
            (i, res.await.expect("no answer within 60 s: the sink hangs"))
        });
    }
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined.expect("a delivery task panicked") {
            (i, Ok(())) => ok.push(i),
            (i, Err(f)) => failed.push((i, f)),
        }
    }
    ok.sort_unstable();
    let index = poison.map(|p| p.index);
    // All of them first: the count shows what one poison hook cost the others.
    assert!(
        failed.len() == usize::from(index.is_some())
            && failed.iter().all(|(i, _)| Some(*i) == index),
        "{} ok, {} failed, the first: {:?}",
        ok.len(),
        failed.len(),
        failed.first().map(|(i, f)| format!("hook {i}: {f}"))
    );
    if let Some(p) = poison {
        assert_refused("the poison hook", &failed[0].1, p.field, p.value);
    }
    eprintln!(
        "{n} hooks, {} poison: {} delivered, in {:?}",
        usize::from(index.is_some()),
        ok.len(),
        started.elapsed()
    );
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_build_their_hooks() {
        let h = header("X-Poison", "v-é", Want::Delivered);
        let (env, ctx) = h.hook(Parts::new("h1")).unwrap();
        assert_eq!(env.header("X-Poison"), Some("v-é"));
        assert_eq!(
            (env.id(), env.dedupe_key(), ctx.replay_id.as_deref()),
            ("h1", None, None)
        );
        let (env, _) = id("i".repeat(5), Want::Delivered)
            .hook(Parts::keyed("h2"))
            .unwrap();
        assert_eq!((env.id(), env.dedupe_key()), ("iiiii", Some("evt-h2")));
        let both = Row::custom("key", "s", Want::Delivered, |p, v| {
            p.id = format!("{}-{v}", p.id);
            p.source = v.to_owned();
        });
        let (env, _) = both.hook(Parts::new("h3")).unwrap();
        assert_eq!((env.id(), env.source_id()), ("h3-s", "s"));
        assert!(
            source("a\0b", Want::Unbuildable)
                .hook(Parts::new("h"))
                .is_err()
        );
        assert_eq!(
            dedupe("x".repeat(50), Want::Unbuildable).to_string(),
            format!("dedupe key {:?}... (50 bytes)", "x".repeat(40))
        );
    }

    #[test]
    #[should_panic(expected = "the value shows")]
    fn a_reason_showing_the_value_fails() {
        assert_absent("row", "bad subject evt-1234", "evt-1234");
    }

    #[test]
    #[should_panic(expected = "not printable ASCII")]
    fn a_reason_with_a_noncharacter_fails() {
        assert_absent("row", "bad subject \u{FFFF}", "evt\u{FFFF}");
    }

    #[test]
    fn a_short_value_is_too_generic_to_look_for() {
        assert_absent("row", "routing key has a #", "#");
    }
}
