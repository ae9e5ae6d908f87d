//! Every row of the classification table, provoked by a real server answering it.

use crate::server::{Reply, Server, always};
use crate::{builder, class_of, deliver, deliver_attempt, envelope};
use ankusa_sink_core::Class;
use ankusa_sink_kit::redact_url;
use std::num::NonZeroU64;
use std::time::{Duration, SystemTime};

fn ra(ms: u64) -> Class {
    Class::RetryAfter(NonZeroU64::new(ms).unwrap())
}

/// Deliver once to a server that always answers `reply`; also returns the server.
async fn answer(reply: Reply) -> (Result<(), ankusa_sink_core::Failure>, Server) {
    let server = Server::start(always(reply)).await;
    let sink = builder(&server).build().unwrap();
    let r = deliver(&sink, &envelope(b"{}")).await;
    (r, server)
}

#[tokio::test]
async fn row_2xx_is_ok() {
    for status in [200, 201, 202, 204, 299] {
        let (r, server) = answer(Reply::status(status)).await;
        assert!(r.is_ok(), "{status}: {r:?}");
        assert_eq!(server.captured().len(), 1);
    }
}

#[tokio::test]
async fn row_410_is_permanent() {
    let (r, _s) = answer(Reply::status(410)).await;
    assert_eq!(class_of(&r), Class::Permanent);
    assert!(r.unwrap_err().to_string().contains("410 Gone"));
    // A Retry-After does not turn "gone" into a pause.
    let (r, _s) = answer(Reply::with_header(410, "retry-after", "5")).await;
    assert_eq!(class_of(&r), Class::Permanent);
}

#[tokio::test]
async fn row_400_413_422_501_are_permanent() {
    for status in [400, 413, 422, 501] {
        let (r, _s) = answer(Reply::status(status)).await;
        assert_eq!(class_of(&r), Class::Permanent, "{status}");
        let (r, _s) = answer(Reply::with_header(status, "retry-after", "5")).await;
        assert_eq!(class_of(&r), Class::Permanent, "{status} with Retry-After");
    }
}

#[tokio::test]
async fn row_401_403_404_405_are_config() {
    for status in [401, 403, 404, 405] {
        let (r, _s) = answer(Reply::status(status)).await;
        assert_eq!(class_of(&r), Class::Config, "{status}");
    }
}

#[tokio::test]
async fn row_301_308_are_config_naming_the_redacted_location_and_not_followed() {
    for status in [301, 308] {
        let moved_to = "https://user:hunter2@new.example/hooks?token=sup3rsecret#frag";
        let (r, server) = answer(Reply::with_header(status, "location", moved_to)).await;
        assert_eq!(class_of(&r), Class::Config, "{status}");
        let text = r.as_ref().unwrap_err().to_string();
        assert!(text.contains(&redact_url(moved_to)), "{status}: {text}");
        assert!(
            text.contains("https://new.example/REDACTED-PATH-"),
            "{status}: {text}"
        );
        assert!(
            !text.contains("sup3rsecret") && !text.contains("hunter2"),
            "{text}"
        );
        assert_eq!(server.requests(), 1, "a redirect was followed");

        // A relative Location is resolved against the sink's URL; its path may carry a
        // token, so it shows hashed unless show_path.
        let location = "/v2/services/T0/B0/m0ved-t0ken";
        let (r, server) = answer(Reply::with_header(status, "location", location)).await;
        let text = r.unwrap_err().to_string();
        assert!(text.contains(&redact_url(&server.url(location))), "{text}");
        assert!(!text.contains("m0ved-t0ken"), "{text}");
        assert_eq!(server.requests(), 1);
        let sink = builder(&server).show_path(true).build().unwrap();
        let text = deliver(&sink, &envelope(b"{}"))
            .await
            .unwrap_err()
            .to_string();
        assert!(text.contains(&server.url(location)), "{text}");
    }
}

#[tokio::test]
async fn row_retryable_statuses_with_delta_seconds_retry_after() {
    for status in [408, 425, 429, 500, 502, 503, 504] {
        let (r, _s) = answer(Reply::with_header(status, "retry-after", "7")).await;
        assert_eq!(class_of(&r), ra(7_000), "{status}");
    }
}

#[tokio::test]
async fn row_retryable_statuses_with_http_date_retry_after() {
    let at = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
    for status in [408, 425, 429, 500, 502, 503, 504] {
        let (r, _s) = answer(Reply::with_header(status, "retry-after", &at)).await;
        let ms = class_of(&r).retry_after_ms().expect("retry-after");
        // Second precision of the date, minus the time the test took so far.
        assert!((60_000..=120_000).contains(&ms), "{status}: {ms}");
    }
}

#[tokio::test]
async fn a_retry_after_date_in_the_past_is_the_smallest_pause() {
    for value in ["Sun, 06 Nov 1994 08:49:37 GMT", "0"] {
        let (r, _s) = answer(Reply::with_header(503, "retry-after", value)).await;
        assert_eq!(class_of(&r), ra(1), "{value}");
    }
}

#[tokio::test]
async fn row_429_without_retry_after_is_throttled() {
    let server = Server::start(always(Reply::status(429))).await;
    let sink = builder(&server).build().unwrap();
    let env = envelope(b"{}");
    // The same class on every attempt: dispatch draws the pause.
    for attempt in [1u32, 2, 4, 9] {
        let r = deliver_attempt(&sink, &env, attempt).await;
        assert_eq!(class_of(&r), Class::Throttled, "attempt {attempt}");
    }
}

#[tokio::test]
async fn a_malformed_retry_after_is_treated_as_absent() {
    for bad in ["soon", "-1", "1.5", "Sun, 99 Nov 1994 08:49:37 GMT"] {
        // 503's other row: transient.
        let (r, _s) = answer(Reply::with_header(503, "retry-after", bad)).await;
        assert_eq!(class_of(&r), Class::Transient, "503 {bad}");
        // 429's other row: throttled, the pause is dispatch's to draw.
        let (r, _s) = answer(Reply::with_header(429, "retry-after", bad)).await;
        assert_eq!(class_of(&r), Class::Throttled, "429 {bad}");
    }
}

#[tokio::test]
async fn row_other_statuses_are_transient() {
    // Other 3xx (never followed), other 4xx, other 5xx, and the retryable ones without
    // Retry-After.
    for status in [
        302, 303, 304, 307, 402, 406, 409, 415, 418, 451, 505, 511, 408, 425, 500, 502, 503, 504,
    ] {
        let reply = if (300..400).contains(&status) {
            Reply::with_header(status, "location", "/elsewhere")
        } else {
            Reply::status(status)
        };
        let (r, server) = answer(reply).await;
        assert_eq!(class_of(&r), Class::Transient, "{status}");
        assert_eq!(server.requests(), 1, "{status}: more than one request");
        assert_eq!(server.captured()[0].target, "/hooks");
    }
}

/// `may_have_landed` of answers from a real server: a `503` (RFC 9110 §15.6.4: the server
/// cannot handle the request now) and a `501` (it does not support the method) say the
/// request was not processed, `false`; any other `5xx` may come after the endpoint acted,
/// `true`; a `4xx` refused it, `false`. With or without `Retry-After`.
#[tokio::test]
async fn answers_say_whether_the_hook_may_have_landed() {
    for (status, want) in [
        (503, false),
        (501, false),
        (500, true),
        (502, true),
        (504, true),
        (505, true),
        (511, true),
        (400, false),
        (429, false),
    ] {
        for reply in [
            Reply::status(status),
            Reply::with_header(status, "retry-after", "7"),
        ] {
            let (r, _s) = answer(reply).await;
            let f = r.expect_err("a failure");
            assert_eq!(f.may_have_landed(), Some(want), "{status}: {f}");
        }
    }
}

/// A sink to `server` with the operator's `[status_classes]` (as a sink file writes them).
fn with_classes(server: &Server, classes: serde_json::Value) -> ankusa_sink_http::HttpSink {
    let config: ankusa_sink_http::HttpConfig = serde_json::from_value(serde_json::json!({
        "url": server.url("/hooks"),
        "status_classes": classes,
    }))
    .unwrap();
    ankusa_sink_http::HttpSink::new(config).unwrap()
}

#[tokio::test]
async fn status_classes_override_the_table_the_most_specific_key_winning() {
    let classes = serde_json::json!({
        "409": "ok", "404": "transient", "4xx": "permanent",
        "5xx": "permanent", "503": "retry_after", "2xx": "transient"
    });
    for (reply, want) in [
        (Reply::status(409), None),
        (Reply::status(404), Some(Class::Transient)),
        (Reply::status(418), Some(Class::Permanent)),
        (Reply::status(401), Some(Class::Permanent)),
        (Reply::status(500), Some(Class::Permanent)),
        (Reply::with_header(503, "retry-after", "7"), Some(ra(7000))),
        (Reply::status(503), Some(Class::Throttled)),
        (Reply::status(204), Some(Class::Transient)),
        // Not named: the sink's own table.
        (Reply::status(302), Some(Class::Transient)),
    ] {
        let status = reply.final_status().unwrap();
        let server = Server::start(always(reply)).await;
        let sink = with_classes(&server, classes.clone());
        let r = deliver(&sink, &envelope(b"{}")).await;
        match want {
            None => assert!(r.is_ok(), "{status}: {r:?}"),
            Some(c) => {
                assert_eq!(class_of(&r), c, "{status}");
                if status != 302 {
                    assert!(
                        r.unwrap_err().to_string().contains("status_classes"),
                        "{status}: the reason says who classed it"
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn a_retry_after_status_class_honours_a_retry_after_on_any_status() {
    // 409 has no pause in the sink's own table; the operator made it one.
    let server = Server::start(always(Reply::with_header(409, "retry-after", "3"))).await;
    let sink = with_classes(&server, serde_json::json!({"409": "retry_after"}));
    let r = deliver(&sink, &envelope(b"{}")).await;
    assert_eq!(class_of(&r), ra(3000));
}

#[test]
fn status_classes_with_a_bad_key_or_value_are_config_errors() {
    for (classes, names) in [
        (serde_json::json!({"600": "ok"}), "600"),
        (serde_json::json!({"4x": "ok"}), "4x"),
        (serde_json::json!({"409": "maybe"}), "maybe"),
    ] {
        let e = serde_json::from_value::<ankusa_sink_http::HttpConfig>(serde_json::json!({
            "url": "https://hooks.example/in",
            "status_classes": classes,
        }))
        .unwrap_err()
        .to_string();
        assert!(e.contains(names) || e.contains("status_classes"), "{e}");
    }
}
