//! [`TraceContext`]: the W3C Trace Context of one delivery attempt, which every sink sends
//! beside the message (`traceparent`, and `tracestate` when the hook brought one).

use ankusa_sink_core::Ctx;
use std::fmt;
use std::sync::Arc;

/// The length of a version-00 `traceparent`: `00-` + 32 + `-` + 16 + `-` + 2.
const TRACEPARENT_LEN: usize = 55;
/// The longest `tracestate` passed on (W3C: at least 512 must be propagated; longer ones
/// may be dropped, and are).
pub const MAX_TRACESTATE_BYTES: usize = 512;
/// The most `tracestate` list members (W3C).
const MAX_TRACESTATE_MEMBERS: usize = 32;

/// The W3C Trace Context of one attempt: the attempt span's trace id and span id as a
/// version-00 `traceparent`, and the hook's `tracestate` when it had a valid one.
///
/// Dispatch makes one per attempt ([`TraceContext::child_of`] the hook's stored
/// `traceparent`, or [`TraceContext::root`] when it has none) and hands it to the sink as
/// a context extension (`ctx.with_extension(trace)`, read with [`TraceContext::of`]);
/// [`Outgoing`](crate::Outgoing) sends it as the `traceparent` (and `tracestate`)
/// attribute, header or field, and in CloudEvents mode as the distributed-tracing
/// extension. Both texts are checked against the W3C grammar:
/// what a hook brought reaches a destination only when it is well formed.
#[derive(Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: [u8; TRACEPARENT_LEN],
    tracestate: Option<Arc<str>>,
}

impl TraceContext {
    /// The trace context `ctx` carries: dispatch sets one on every attempt.
    pub fn of(ctx: &Ctx) -> Option<&TraceContext> {
        ctx.extension()
    }

    /// The context of a span `span_id` in trace `trace_id`, with the W3C `flags` byte
    /// (`0x01`: sampled). `None` when either id is all zeros (invalid in W3C).
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], flags: u8) -> Option<Self> {
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        let mut tp = [0u8; TRACEPARENT_LEN];
        tp[..3].copy_from_slice(b"00-");
        hex_into(&trace_id, &mut tp[3..35]);
        tp[35] = b'-';
        hex_into(&span_id, &mut tp[36..52]);
        tp[52] = b'-';
        hex_into(&[flags], &mut tp[53..55]);
        Some(TraceContext {
            traceparent: tp,
            tracestate: None,
        })
    }

    /// A new trace: random trace and span ids, sampled.
    pub fn root() -> Self {
        loop {
            if let Some(t) = TraceContext::new(rand::random(), rand::random(), 0x01) {
                return t;
            }
        }
    }

    /// A new span (random id) in the trace of `parent`, with its flags and `tracestate`.
    pub fn child_of(parent: &TraceContext) -> Self {
        TraceContext::new(parent.trace_id(), random_span_id(), parent.flags())
            .expect("the parent's trace id is not zero and the span id is not")
            .with_tracestate_of(parent)
    }

    /// Parse a W3C `traceparent`: version `00` exactly as specified, or a later version's
    /// first four fields (as W3C asks), read as version 00. `None` when malformed, or when
    /// either id is all zeros.
    pub fn parse(traceparent: &str) -> Option<Self> {
        let s = traceparent.trim_matches([' ', '\t']).as_bytes();
        if s.len() < TRACEPARENT_LEN {
            return None;
        }
        let version = hex_byte(&s[0..2])?;
        // Version ff is invalid; 00 has exactly four fields; a later version may append
        // fields after a dash.
        let fits = match version {
            0xff => false,
            0x00 => s.len() == TRACEPARENT_LEN,
            _ => s.len() == TRACEPARENT_LEN || s[TRACEPARENT_LEN] == b'-',
        };
        if !fits || s[2] != b'-' || s[35] != b'-' || s[52] != b'-' {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, b) in trace_id.iter_mut().enumerate() {
            *b = hex_byte(&s[3 + 2 * i..5 + 2 * i])?;
        }
        let mut span_id = [0u8; 8];
        for (i, b) in span_id.iter_mut().enumerate() {
            *b = hex_byte(&s[36 + 2 * i..38 + 2 * i])?;
        }
        TraceContext::new(trace_id, span_id, hex_byte(&s[53..55])?)
    }

    /// This context with `tracestate`, when it is a valid W3C `tracestate` of at most
    /// [`MAX_TRACESTATE_BYTES`] (else without one: W3C says an invalid one is dropped).
    #[must_use]
    pub fn with_tracestate(mut self, tracestate: &str) -> Self {
        let ts = tracestate.trim_matches([' ', '\t']);
        self.tracestate = valid_tracestate(ts).then(|| Arc::from(ts));
        self
    }

    fn with_tracestate_of(mut self, other: &TraceContext) -> Self {
        self.tracestate = other.tracestate.clone();
        self
    }

    /// The version-00 `traceparent`: `00-<trace id>-<span id>-<flags>`, lowercase hex.
    pub fn traceparent(&self) -> &str {
        std::str::from_utf8(&self.traceparent).expect("built from ASCII hex and dashes")
    }

    /// The `tracestate`, when there is one.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace id's 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> &str {
        &self.traceparent()[3..35]
    }

    /// The span id's 16 lowercase hex digits.
    pub fn span_id_hex(&self) -> &str {
        &self.traceparent()[36..52]
    }

    /// The trace id.
    pub fn trace_id(&self) -> [u8; 16] {
        let mut id = [0u8; 16];
        for (i, b) in id.iter_mut().enumerate() {
            *b = hex_byte(&self.traceparent[3 + 2 * i..5 + 2 * i]).expect("own hex");
        }
        id
    }

    /// The span id.
    pub fn span_id(&self) -> [u8; 8] {
        let mut id = [0u8; 8];
        for (i, b) in id.iter_mut().enumerate() {
            *b = hex_byte(&self.traceparent[36 + 2 * i..38 + 2 * i]).expect("own hex");
        }
        id
    }

    /// The W3C flags byte (`0x01`: sampled).
    pub fn flags(&self) -> u8 {
        hex_byte(&self.traceparent[53..55]).expect("own hex")
    }
}

/// The ids only: a `tracestate` is the hook's (it may name vendors' values).
impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceContext")
            .field("traceparent", &self.traceparent())
            .field("tracestate", &self.tracestate.as_ref().map(|t| t.len()))
            .finish()
    }
}

fn random_span_id() -> [u8; 8] {
    loop {
        let id: [u8; 8] = rand::random();
        if id != [0; 8] {
            return id;
        }
    }
}

fn hex_into(bytes: &[u8], out: &mut [u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = HEX[usize::from(b >> 4)];
        out[2 * i + 1] = HEX[usize::from(b & 0x0f)];
    }
}

/// Two lowercase hex digits (W3C allows no uppercase).
fn hex_byte(two: &[u8]) -> Option<u8> {
    let d = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(d(two[0])? << 4 | d(two[1])?)
}

/// The W3C `tracestate` grammar: up to 32 comma-separated `key=value` members (empty
/// members and optional spaces or tabs around them allowed); a key is a lowercase simple
/// key of at most 256 characters or `tenant@system` (241 + 14); a value is up to 256
/// printable ASCII characters other than `,` and `=` (a trailing space is the optional
/// whitespace around a member).
fn valid_tracestate(ts: &str) -> bool {
    if ts.len() > MAX_TRACESTATE_BYTES || ts.is_empty() {
        return false;
    }
    let mut members = 0;
    for member in ts.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        members += 1;
        let Some((key, value)) = member.split_once('=') else {
            return false;
        };
        if members > MAX_TRACESTATE_MEMBERS || !valid_key(key) || !valid_value(value) {
            return false;
        }
    }
    members > 0
}

fn valid_key(key: &str) -> bool {
    let rest = |s: &str| {
        s.bytes().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-' | b'*' | b'/')
        })
    };
    match key.split_once('@') {
        None => {
            let first = key.bytes().next();
            (1..=256).contains(&key.len())
                && first.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                && rest(key)
        }
        Some((tenant, system)) => {
            let t0 = tenant.bytes().next();
            let s0 = system.bytes().next();
            (1..=241).contains(&tenant.len())
                && (1..=14).contains(&system.len())
                && t0.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                && s0.is_some_and(|c| c.is_ascii_lowercase())
                && rest(tenant)
                && rest(system)
        }
    }
}

fn valid_value(value: &str) -> bool {
    (1..=256).contains(&value.len())
        && value
            .bytes()
            .all(|c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=')
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn parses_and_prints_the_w3c_example() {
        let t = TraceContext::parse(TP).unwrap();
        assert_eq!(t.traceparent(), TP);
        assert_eq!(t.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.span_id_hex(), "00f067aa0ba902b7");
        assert_eq!(t.flags(), 1);
        assert_eq!(t.tracestate(), None);
        // A later version: its first four fields, and more after a dash.
        let v1 = TraceContext::parse(&format!("01{}-extra", &TP[2..])).unwrap();
        assert_eq!(v1.traceparent(), TP);
    }

    #[test]
    fn refuses_what_w3c_calls_invalid() {
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00-4bf92f3577b34da6a3ce929d0e0e4736\r\n-00f067aa0ba902b-01",
        ] {
            assert!(TraceContext::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_child_keeps_trace_flags_and_state_with_a_new_span() {
        let parent = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
            .unwrap()
            .with_tracestate("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
        let child = TraceContext::child_of(&parent);
        assert_eq!(child.trace_id(), parent.trace_id());
        assert_ne!(child.span_id(), parent.span_id());
        assert_eq!(child.flags(), 0);
        assert_eq!(child.tracestate(), parent.tracestate());
        let root = TraceContext::root();
        assert_eq!(root.flags(), 1);
        assert_eq!(TraceContext::parse(root.traceparent()), Some(root.clone()));
        assert_ne!(root.trace_id(), TraceContext::root().trace_id());
    }

    #[test]
    fn only_a_valid_tracestate_is_kept() {
        let t = TraceContext::parse(TP).unwrap();
        for good in [
            "rojo=00f067aa0ba902b7",
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
            " a=1 ,, b@vendor=x y ",
            "tenant-1@sys/x=v:1;2",
        ] {
            assert!(
                t.clone().with_tracestate(good).tracestate().is_some(),
                "{good:?}"
            );
        }
        let long = format!("a={}", "x".repeat(257));
        let many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        for bad in [
            "",
            "noequals",
            "Upper=1",
            "a=b=c",
            "a=1\r\nx-injected: 1",
            "@v=1",
            "a@=1",
            "a=\u{e9}",
            long.as_str(),
            many.as_str(),
        ] {
            assert_eq!(t.clone().with_tracestate(bad).tracestate(), None, "{bad:?}");
        }
    }

    #[test]
    fn debug_shows_ids_not_the_state() {
        let t = TraceContext::parse(TP)
            .unwrap()
            .with_tracestate("vendor=secretish");
        let d = format!("{t:?}");
        assert!(d.contains(TP) && !d.contains("secretish"), "{d}");
    }
}
