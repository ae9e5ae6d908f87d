//! Failures below HTTP: timeouts, resets, refused connections, huge answers, restarts.

use crate::server::{Reply, Server, always, sequence};
use crate::{builder, class_of, deliver, envelope, reason};
use ankusa_sink_core::Class;
use ankusa_sink_http::{HttpError, TransportKind};
use std::time::{Duration, Instant};

fn kind(r: &Result<(), ankusa_sink_core::Failure>) -> TransportKind {
    match reason(r) {
        HttpError::Transport { kind, .. } => *kind,
        other => panic!("not a transport failure: {other}"),
    }
}

#[tokio::test]
async fn a_slow_server_hits_the_timeout() {
    let server = Server::start(always(Reply::Slow(
        Duration::from_secs(30),
        Box::new(Reply::status(200)),
    )))
    .await;
    let sink = builder(&server)
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let r = deliver(&sink, &envelope(b"{}")).await;
    assert_eq!(class_of(&r), Class::Transient);
    assert_eq!(kind(&r), TransportKind::Timeout);
    assert_eq!(server.captured().len(), 1, "the request did arrive");
}

#[tokio::test]
async fn a_refused_connection_is_transient() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let sink = ankusa_sink_http::HttpSink::builder(format!("http://{addr}/hooks"))
        .build()
        .unwrap();
    let r = deliver(&sink, &envelope(b"{}")).await;
    assert_eq!(class_of(&r), Class::Transient);
    assert_eq!(kind(&r), TransportKind::Refused);
}

#[tokio::test]
async fn a_reset_while_the_body_is_sent_is_transient() {
    let server = Server::start(always(Reply::ResetMidRequest)).await;
    let sink = builder(&server).build().unwrap();
    let r = deliver(&sink, &envelope(&vec![b'a'; 4 << 20])).await;
    assert_eq!(class_of(&r), Class::Transient, "{r:?}");
    assert_eq!(kind(&r), TransportKind::Reset, "{r:?}");
    assert_eq!(server.requests(), 1);
    assert!(
        server.captured().is_empty(),
        "the body was never read whole"
    );
}

#[tokio::test]
async fn a_reset_mid_answer_body_keeps_the_status_class() {
    // The status line decides; a broken answer body after it changes nothing.
    let server = Server::start(sequence(
        vec![
            Reply::ResetMidAnswer {
                status: 200,
                declared: 100_000,
                sent: 1_000,
            },
            Reply::ResetMidAnswer {
                status: 503,
                declared: 100_000,
                sent: 1_000,
            },
        ],
        Reply::status(200),
    ))
    .await;
    let sink = builder(&server).build().unwrap();
    let env = envelope(b"{}");
    assert!(deliver(&sink, &env).await.is_ok());
    let r = deliver(&sink, &env).await;
    assert_eq!(class_of(&r), Class::Transient);
    assert!(matches!(reason(&r), HttpError::Status { status: 503, .. }));
    // The next delivery opens a new connection and succeeds.
    assert!(deliver(&sink, &env).await.is_ok());
    assert_eq!(server.connections(), 3);
}

/// The sink reads at most `max_response_bytes` of an answer (then closes the connection),
/// whatever the answer offers: the server, whose send buffer is fixed at 16 KiB, could
/// write only the cap plus what the buffers between it and the sink's reads hold (its send
/// buffer, the client's receive buffer, hyper's read-ahead: 70 to 180 KiB measured on
/// loopback), never the 1 GiB it offered. And at least the cap: the sink read up to it.
#[tokio::test]
async fn a_huge_answer_is_not_read_past_the_cap() {
    const TOTAL: u64 = 1 << 30;
    /// What the buffers may hold beyond the cap: 64 KiB send buffer (16 KiB, doubled by
    /// the kernel, plus a chunk in flight), the client's receive buffer (128 KiB at first,
    /// autotuned), hyper's read buffer (at most about 400 KiB); measured 70 to 180 KiB.
    const SLACK: u64 = 512 << 10;
    // The default cap (64 KiB) and one of 4 MiB: a sink that ignored the cap would read
    // the whole gigabyte, one that read twice the cap would exceed 4 MiB + SLACK.
    for (max, status) in [
        (None, 200u16),
        (None, 500),
        (Some(4 << 20), 200),
        (Some(4 << 20), 500),
    ] {
        let server = Server::start_with_send_buffer(
            always(Reply::Huge {
                status,
                total: TOTAL,
            }),
            16 << 10,
        )
        .await;
        let mut b = builder(&server).timeout(Duration::from_secs(60));
        if let Some(max) = max {
            b = b.max_response_bytes(max);
        }
        let cap = max.unwrap_or(64 << 10) as u64;
        let sink = b.build().unwrap();
        let r = deliver(&sink, &envelope(b"{}")).await;
        if status == 200 {
            assert!(r.is_ok(), "{r:?}");
        } else {
            assert_eq!(class_of(&r), Class::Transient);
        }
        let written = server.huge_written().await;
        eprintln!("{status} answer, cap {cap}: the server wrote {written} of {TOTAL} body bytes");
        assert!(
            (cap..=cap + SLACK).contains(&written),
            "cap {cap}: the server wrote {written} bytes"
        );
    }
}

#[tokio::test]
async fn the_sink_recovers_after_the_server_restarts_on_the_same_port() {
    let server = Server::start(always(Reply::status(200))).await;
    let addr = server.addr();
    let sink = builder(&server).build().unwrap();
    let env = envelope(b"{}");
    deliver(&sink, &env).await.unwrap();

    server.stop().await;
    let down = deliver(&sink, &env).await;
    assert_eq!(class_of(&down), Class::Transient, "{down:?}");

    let server = Server::start_on(addr, always(Reply::status(200)), None).await;
    // At most one attempt may still meet the dead pooled connection; then it must work.
    let mut results = Vec::new();
    for _ in 0..3 {
        let r = deliver(&sink, &env).await;
        let ok = r.is_ok();
        results.push(r);
        if ok {
            break;
        }
    }
    assert!(
        results.last().unwrap().is_ok(),
        "did not recover: {results:?}"
    );
    assert!(results.len() <= 2, "{results:?}");
    assert!(!server.captured().is_empty());
}

#[tokio::test]
async fn a_trickled_answer_body_hits_the_total_timeout() {
    // The status and headers arrive at once, then one body byte every 50 ms of 100 KB
    // (over an hour): the whole-request timeout must cut the body read short.
    for status in [200u16, 503] {
        let server = Server::start(always(Reply::Trickle {
            status,
            total: 100_000,
            every: Duration::from_millis(50),
        }))
        .await;
        let sink = builder(&server)
            .timeout(Duration::from_millis(600))
            .build()
            .unwrap();
        let started = Instant::now();
        let r = deliver(&sink, &envelope(b"{}")).await;
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "{status}: took {took:?}");
        assert!(
            took >= Duration::from_millis(500),
            "{status}: took {took:?}"
        );
        // The status line already decided: the hook was accepted, or the 503 is transient.
        if status == 200 {
            assert!(r.is_ok(), "{r:?}");
        } else {
            assert_eq!(class_of(&r), Class::Transient);
            assert!(matches!(reason(&r), HttpError::Status { status: 503, .. }));
        }
        // The server saw some of the body go out before the client hung up.
        let written = server.trickled().await;
        assert!((1..100_000).contains(&written), "{status}: {written}");
    }
}

/// A listener that never accepts, with its accept queue already full: the kernel drops
/// further SYNs, so a new connect hangs until the client gives up. Keep both alive.
pub(crate) async fn full_listener() -> (tokio::net::TcpListener, Vec<tokio::net::TcpStream>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..2 {
        let connect = tokio::net::TcpStream::connect(addr);
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(200), connect).await {
            fillers.push(s);
        }
    }
    (listener, fillers)
}

#[tokio::test]
async fn a_connect_that_never_completes_hits_the_connect_timeout() {
    let (listener, fillers) = full_listener().await;
    let addr = listener.local_addr().unwrap();
    let sink = ankusa_sink_http::HttpSink::builder(format!("http://{addr}/hooks"))
        .connect_timeout(Duration::from_millis(300))
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let r = deliver(&sink, &envelope(b"{}")).await;
    assert_eq!(class_of(&r), Class::Transient, "{r:?}");
    assert_eq!(kind(&r), TransportKind::Timeout, "{r:?}");
    drop((listener, fillers));
}
