//! Issue 60: one poison hook fails alone. Each row is a hook carrying a value an HTTP
//! header cannot hold (or one it must take), delivered to the local server: a refused row
//! is permanent, names the header and never its value, nothing is sent, and the healthy
//! hook right after it on the same sink is delivered. No URL is derived from a hook (the
//! sink's URL is the config's), so only header values are checked.

use crate::builder;
use crate::server::{Reply, Server, always};
use ankusa_sink_core::{Class, Ctx, Envelope, EnvelopeError, Sink};

/// What a row expects.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Delivered, and the value arrived in this header.
    Ok(&'static str),
    /// Permanent, not sent, the reason naming this header.
    Refused(&'static str),
    /// The envelope builder refuses it first: no sink ever sees such a hook.
    Unbuildable,
}

type Hook = Result<(Envelope, Ctx), EnvelopeError>;

/// One row: its name, the poison value, how the hook is built around it, what must happen.
type Row = (&'static str, String, fn(&str, &str) -> Hook, Want);

fn base(id: &str) -> ankusa_sink_core::EnvelopeBuilder {
    Envelope::builder(id, "stripe", br#"{"ok":true}"#.to_vec())
        .tenant_id("acme")
        .content_type("application/json")
}

fn dedupe(id: &str, v: &str) -> Hook {
    let e = base(id).dedupe_key(v).build()?;
    let c = Ctx::for_envelope(&e);
    Ok((e, c))
}

fn replay(id: &str, v: &str) -> Hook {
    let e = base(id).build()?;
    let c = Ctx::for_envelope(&e).with_replay_id(v);
    Ok((e, c))
}

fn forwarded(id: &str, v: &str) -> Hook {
    let e = base(id).header("X-Poison", v).build()?;
    let c = Ctx::for_envelope(&e);
    Ok((e, c))
}

#[tokio::test]
async fn http_poison_table() {
    use Want::*;
    let server = Server::start(always(Reply::status(204))).await;
    let sink = builder(&server).build().unwrap();
    let replay_header = Refused("header \"x-ankusa-replay-id\"");
    let rows: Vec<Row> = vec![
        ("replay id NUL", "r\u{0}x".into(), replay, replay_header),
        ("replay id CR", "r\rx".into(), replay, replay_header),
        ("replay id LF", "r\nx".into(), replay, replay_header),
        (
            "replay id CR LF injection",
            "r\r\nx-evil: 1".into(),
            replay,
            replay_header,
        ),
        ("replay id DEL", "r\u{7f}x".into(), replay, replay_header),
        (
            "replay id tab",
            "r\tx".into(),
            replay,
            Ok("x-ankusa-replay-id"),
        ),
        ("dedupe key NUL", "evt\u{0}x".into(), dedupe, Unbuildable),
        ("dedupe key CR LF", "evt\r\nx".into(), dedupe, Unbuildable),
        ("forwarded header LF", "v\nx".into(), forwarded, Unbuildable),
        (
            "forwarded header NUL",
            "v\u{0}x".into(),
            forwarded,
            Unbuildable,
        ),
        // Beyond ASCII is obs-text to HTTP: sent as its UTF-8 bytes.
        (
            "dedupe key U+FFFF",
            "evt\u{FFFF}x".into(),
            dedupe,
            Ok("x-ankusa-dedupe-key"),
        ),
        (
            "dedupe key é",
            "evt-é".into(),
            dedupe,
            Ok("x-ankusa-dedupe-key"),
        ),
        (
            "dedupe key emoji",
            "evt-🦀".into(),
            dedupe,
            Ok("x-ankusa-dedupe-key"),
        ),
        (
            "dedupe key U+FFFD",
            "evt\u{FFFD}x".into(),
            dedupe,
            Ok("x-ankusa-dedupe-key"),
        ),
        (
            "forwarded header U+FFFF",
            "v\u{FFFF}x".into(),
            forwarded,
            Ok("x-poison"),
        ),
        (
            "forwarded header é",
            "v-é".into(),
            forwarded,
            Ok("x-poison"),
        ),
    ];
    let mut sent = 0;
    for (i, (name, poison, build, expect)) in rows.into_iter().enumerate() {
        let id = format!("p{i}");
        match (expect, build(&id, &poison)) {
            (Unbuildable, Err(e)) => {
                assert!(!e.to_string().contains(&poison), "{name}: {e}");
                continue;
            }
            (Unbuildable, Result::Ok(_)) => panic!("{name}: the envelope builder took it"),
            (_, Err(e)) => panic!("{name}: unbuildable: {e}"),
            (Ok(header), Result::Ok((e, c))) => {
                sink.deliver(&e, &c)
                    .await
                    .unwrap_or_else(|f| panic!("{name}: {f}"));
                sent += 1;
                let captured = server.captured();
                let got = captured.last().unwrap().header(header).map(str::to_owned);
                assert_eq!(got.as_deref(), Some(poison.as_str()), "{name}");
            }
            (Refused(field), Result::Ok((e, c))) => {
                let f = sink.deliver(&e, &c).await.expect_err(name);
                assert_eq!(f.class(), Class::Permanent, "{name}: {f}");
                assert_eq!(f.may_have_landed(), Some(false), "{name}: {f}");
                let text = f.to_string();
                assert!(text.contains(field), "{name}: {text}");
                assert!(!text.contains(&poison), "{name}: the value leaked");
                assert_eq!(server.requests(), sent, "{name}: nothing was sent");
            }
        }
        let healthy = base(&format!("h{i}")).build().unwrap();
        sink.deliver(&healthy, &Ctx::for_envelope(&healthy))
            .await
            .unwrap_or_else(|f| panic!("healthy hook after {name}: {f}"));
        sent += 1;
    }
    assert_eq!(server.requests(), sent);
    server.stop().await;
}
