//! Issue 60: one poison hook fails alone. Each row is a hook carrying a value an HTTP
//! header cannot hold (or one it must take), delivered to the local server: a refused row
//! is permanent, names the header and never its value, nothing is sent, and the healthy
//! hook right after it on the same sink is delivered. No URL is derived from a hook (the
//! sink's URL is the config's), so only header values are checked.

use crate::builder;
use crate::server::{Reply, Server, always};
use ankusa_sink_testkit::support::poison::{self, Field, Parts, Row, Step, Want};
use ankusa_sink_testkit::support::poison::{dedupe, header, replay};

#[tokio::test]
async fn http_poison_table() {
    use Want::{Delivered, Refused, Unbuildable};
    let server = Server::start(always(Reply::status(204))).await;
    let sink = builder(&server).build().unwrap();
    let replay_header = Refused("header \"x-ankusa-replay-id\"");
    let rows: Vec<Row> = vec![
        replay("r\u{0}x", replay_header),
        replay("r\rx", replay_header),
        replay("r\nx", replay_header),
        replay("r\r\nx-evil: 1", replay_header),
        replay("r\u{7f}x", replay_header),
        replay("r\tx", Delivered),
        dedupe("evt\u{0}x", Unbuildable),
        dedupe("evt\r\nx", Unbuildable),
        header("X-Poison", "v\nx", Unbuildable),
        header("X-Poison", "v\u{0}x", Unbuildable),
        // Beyond ASCII is obs-text to HTTP: sent as its UTF-8 bytes.
        dedupe("evt\u{FFFF}x", Delivered),
        dedupe("evt-é", Delivered),
        dedupe("evt-🦀", Delivered),
        dedupe("evt\u{FFFD}x", Delivered),
        header("X-Poison", "v\u{FFFF}x", Delivered),
        header("X-Poison", "v-é", Delivered),
    ];
    // A delivered value arrived in its header; a refused one sent nothing.
    let read_back = async |s: Step<'_>| {
        if s.refused.is_some() {
            assert_eq!(server.requests(), s.sent, "{}: nothing was sent", s.row);
            return;
        }
        let name = match s.row.field {
            Field::Replay => "x-ankusa-replay-id",
            Field::Dedupe => "x-ankusa-dedupe-key",
            Field::Header(_) => "x-poison",
            other => unreachable!("{other}"),
        };
        let captured = server.captured();
        let got = captured.last().unwrap().header(name).map(str::to_owned);
        assert_eq!(got.as_deref(), Some(s.row.value.as_str()), "{}", s.row);
    };
    let sent = poison::run(&rows, Parts::new, |_| &sink, read_back).await;
    assert_eq!(server.requests(), sent.len());
    server.stop().await;
}
