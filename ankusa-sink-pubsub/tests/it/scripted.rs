//! Statuses the emulator cannot produce, from a loopback server that speaks the real
//! protocols: gRPC `google.pubsub.v1.Publisher/Publish` (a hand-written tonic service over
//! prost types) for publishing, and the REST `GET /v1/projects/*/topics/*` and
//! `GET /v1/projects/*/topics/*/subscriptions` the client's admin API uses for `check()` and
//! `require_subscriber`. The official client parses both for real.

use crate::common::{PROJECT, config_at, envelope};
use ankusa_sink_core::{Class, Ctx, Sink};
use ankusa_sink_pubsub::PubSubSink;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt as _};

/// `google.pubsub.v1.PubsubMessage`, the fields the sink sends.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PubsubMessage {
    /// The message data.
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) data: Vec<u8>,
    /// Attributes.
    #[prost(map = "string, string", tag = "2")]
    pub(crate) attributes: HashMap<String, String>,
    /// The ordering key.
    #[prost(string, tag = "5")]
    pub(crate) ordering_key: String,
}

/// `google.pubsub.v1.PublishRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PublishRequest {
    /// `projects/<p>/topics/<t>`.
    #[prost(string, tag = "1")]
    pub(crate) topic: String,
    /// The messages.
    #[prost(message, repeated, tag = "2")]
    pub(crate) messages: Vec<PubsubMessage>,
}

/// `google.pubsub.v1.PublishResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PublishResponse {
    /// One id per message, in order.
    #[prost(string, repeated, tag = "1")]
    pub(crate) message_ids: Vec<String>,
}

/// What the server answers to every call.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Script {
    /// This status, with a `google.rpc.RetryInfo` of this delay when given.
    Fail(Code, Option<Duration>),
    /// Success, but with an empty message id for every message.
    EmptyIds,
    /// Success with ids.
    Ok,
    /// Take the publish and never answer it.
    Hang,
    /// Get-topic and publishes succeed; listing the topic's subscriptions fails with this
    /// status.
    ListFails(Code),
}

/// A running scripted server on 127.0.0.1.
#[derive(Debug, Clone)]
pub(crate) struct Scripted {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    /// Publish RPCs received.
    pub(crate) publishes: Arc<AtomicUsize>,
    /// Messages received in publish RPCs.
    pub(crate) messages: Arc<Mutex<Vec<PubsubMessage>>>,
    /// REST admin calls received.
    pub(crate) admin_calls: Arc<AtomicUsize>,
}

impl Scripted {
    /// `http://127.0.0.1:<port>`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A sink for a topic on this server.
    pub(crate) async fn sink(&self) -> PubSubSink {
        PubSubSink::new(
            config_at("scripted-topic", self.endpoint())
                .with_timeout(Duration::from_secs(5))
                .unwrap(),
        )
        .await
        .expect("a valid config")
    }
}

#[derive(Clone)]
struct PublisherService {
    script: Script,
    state: Scripted,
}

fn status_of(script: Script) -> Option<Status> {
    match script {
        Script::Fail(code, None) => Some(Status::new(code, "scripted failure")),
        Script::Fail(code, Some(delay)) => Some(Status::with_error_details(
            code,
            "scripted failure",
            ErrorDetails::with_retry_info(Some(delay)),
        )),
        Script::EmptyIds | Script::Ok | Script::Hang | Script::ListFails(_) => None,
    }
}

struct Publish(PublisherService);

impl UnaryService<PublishRequest> for Publish {
    type Response = PublishResponse;
    type Future = BoxFuture<tonic::Response<PublishResponse>, Status>;

    fn call(&mut self, request: tonic::Request<PublishRequest>) -> Self::Future {
        let svc = self.0.clone();
        Box::pin(async move {
            let req = request.into_inner();
            svc.state.publishes.fetch_add(1, Ordering::SeqCst);
            let n = req.messages.len();
            svc.state.messages.lock().unwrap().extend(req.messages);
            if let Script::Hang = svc.script {
                std::future::pending::<()>().await;
            }
            if let Some(status) = status_of(svc.script) {
                return Err(status);
            }
            let message_ids = match svc.script {
                Script::EmptyIds => vec![String::new(); n],
                _ => (0..n).map(|i| format!("scripted-{i}")).collect(),
            };
            Ok(tonic::Response::new(PublishResponse { message_ids }))
        })
    }
}

impl<B> Service<http::Request<B>> for PublisherService
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let svc = self.clone();
        Box::pin(async move {
            if req.uri().path() == "/google.pubsub.v1.Publisher/Publish" {
                let mut grpc = Grpc::new(tonic_prost::ProstCodec::default());
                Ok(grpc.unary(Publish(svc), req).await)
            } else {
                Ok(Status::unimplemented("only Publish is scripted").into_http())
            }
        })
    }
}

impl NamedService for PublisherService {
    const NAME: &'static str = "google.pubsub.v1.Publisher";
}

/// The canonical name and HTTP status of a gRPC code, as Google's REST errors carry them.
fn rest_status(code: Code) -> (&'static str, u16) {
    match code {
        Code::PermissionDenied => ("PERMISSION_DENIED", 403),
        Code::Unauthenticated => ("UNAUTHENTICATED", 401),
        Code::NotFound => ("NOT_FOUND", 404),
        Code::InvalidArgument => ("INVALID_ARGUMENT", 400),
        Code::ResourceExhausted => ("RESOURCE_EXHAUSTED", 429),
        Code::Unavailable => ("UNAVAILABLE", 503),
        Code::DeadlineExceeded => ("DEADLINE_EXCEEDED", 504),
        Code::Aborted => ("ABORTED", 409),
        Code::Cancelled => ("CANCELLED", 499),
        Code::Internal => ("INTERNAL", 500),
        _ => ("UNKNOWN", 500),
    }
}

/// Google's REST error document for the script; on success a topic document, or for a
/// subscription listing one subscription.
fn rest_answer(script: Script, path: &str) -> http::Response<axum::body::Body> {
    let listing = path.ends_with("/subscriptions");
    let script = match script {
        Script::ListFails(code) if listing => Script::Fail(code, None),
        other => other,
    };
    let (status, body) = match script {
        Script::Fail(code, delay) => {
            let (name, http_status) = rest_status(code);
            let mut details = Vec::new();
            if let Some(d) = delay {
                details.push(serde_json::json!({
                    "@type": "type.googleapis.com/google.rpc.RetryInfo",
                    "retryDelay": format!("{}.{:03}s", d.as_secs(), d.subsec_millis()),
                }));
            }
            (
                http_status,
                serde_json::json!({"error": {
                    "code": http_status,
                    "message": "scripted failure",
                    "status": name,
                    "details": details,
                }}),
            )
        }
        _ if listing => (
            200,
            serde_json::json!({"subscriptions": [format!("projects/{PROJECT}/subscriptions/s")]}),
        ),
        Script::EmptyIds | Script::Ok | Script::Hang | Script::ListFails(_) => (
            200,
            serde_json::json!({"name": format!("projects/{PROJECT}/topics/scripted-topic")}),
        ),
    };
    http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .expect("a valid response")
}

/// Start a server answering every call with `script`.
pub(crate) async fn start(script: Script) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let state = Scripted {
        addr: listener.local_addr().expect("addr"),
        publishes: Arc::default(),
        messages: Arc::default(),
        admin_calls: Arc::default(),
    };
    let grpc = PublisherService {
        script,
        state: state.clone(),
    };
    let admin_calls = state.admin_calls.clone();
    let router = tonic::service::Routes::new(grpc)
        .into_axum_router()
        .fallback(move |uri: http::Uri| {
            admin_calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(rest_answer(script, uri.path()))
        });
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .accept_http1(true)
            .add_routes(tonic::service::Routes::from(router))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await;
    });
    state
}

/// Deliver one hook through the real client against `script`; the failure's class, after
/// checking the client made exactly one publish RPC (no client-side retries).
async fn deliver_class(script: Script) -> Class {
    let server = start(script).await;
    let sink = server.sink().await;
    let env = envelope("scripted-1", b"{}");
    let err = sink
        .deliver(&env, &Ctx::for_envelope(&env).with_attempt(2))
        .await
        .expect_err("the scripted server fails every publish");
    assert_eq!(server.publishes.load(Ordering::SeqCst), 1, "{err}");
    assert!(err.to_string().contains("scripted failure"), "{err}");
    err.class()
}

/// `check()`'s class against `script` (a REST get-topic).
async fn check_class(script: Script) -> Class {
    let server = start(script).await;
    let err = server
        .sink()
        .await
        .check()
        .await
        .expect_err("the scripted server fails every get");
    assert_eq!(server.admin_calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        server.publishes.load(Ordering::SeqCst),
        0,
        "check published"
    );
    err.class()
}

#[tokio::test]
async fn permission_denied_is_config() {
    let script = Script::Fail(Code::PermissionDenied, None);
    assert_eq!(deliver_class(script).await, Class::Config);
    assert_eq!(check_class(script).await, Class::Config);
}

#[tokio::test]
async fn unauthenticated_is_config() {
    let script = Script::Fail(Code::Unauthenticated, None);
    assert_eq!(deliver_class(script).await, Class::Config);
    assert_eq!(check_class(script).await, Class::Config);
}

#[tokio::test]
async fn not_found_is_config() {
    let script = Script::Fail(Code::NotFound, None);
    assert_eq!(deliver_class(script).await, Class::Config);
    assert_eq!(check_class(script).await, Class::Config);
}

#[tokio::test]
async fn invalid_argument_is_permanent() {
    let script = Script::Fail(Code::InvalidArgument, None);
    assert_eq!(deliver_class(script).await, Class::Permanent);
}

#[tokio::test]
async fn resource_exhausted_with_retry_info_waits_the_servers_delay() {
    let script = Script::Fail(Code::ResourceExhausted, Some(Duration::from_millis(2_500)));
    assert_eq!(
        deliver_class(script).await.retry_after_ms(),
        Some(2_500),
        "RetryInfo over gRPC"
    );
    assert_eq!(
        check_class(script).await.retry_after_ms(),
        Some(2_500),
        "RetryInfo over REST"
    );
}

#[tokio::test]
async fn resource_exhausted_without_retry_info_is_throttled() {
    // No stated pause: dispatch draws throttle_after_ms(attempt) for it.
    let script = Script::Fail(Code::ResourceExhausted, None);
    assert_eq!(deliver_class(script).await, Class::Throttled);
    assert_eq!(check_class(script).await, Class::Throttled);
}

#[tokio::test]
async fn server_side_transient_codes_are_transient() {
    for code in [
        Code::Unavailable,
        Code::DeadlineExceeded,
        Code::Internal,
        Code::Aborted,
        Code::Cancelled,
        Code::Unknown,
        Code::FailedPrecondition,
    ] {
        assert_eq!(
            deliver_class(Script::Fail(code, None)).await,
            Class::Transient,
            "{code:?}"
        );
    }
}

#[tokio::test]
async fn transport_errors_are_transient() {
    // A listener that accepts and closes every connection: the HTTP/2 handshake fails.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    let sink = PubSubSink::new(
        config_at("t-closed", format!("http://{addr}"))
            .with_timeout(Duration::from_secs(5))
            .unwrap(),
    )
    .await
    .unwrap();
    let env = envelope("closed-1", b"{}");
    let err = sink
        .deliver(&env, &Ctx::for_envelope(&env))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Transient, "{err}");

    // Nothing listening at all.
    let port = crate::common::free_port();
    let sink = PubSubSink::new(
        config_at("t-refused", format!("http://127.0.0.1:{port}"))
            .with_timeout(Duration::from_secs(5))
            .unwrap(),
    )
    .await
    .unwrap();
    let err = sink
        .deliver(&env, &Ctx::for_envelope(&env))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Transient, "{err}");
    assert_eq!(sink.check().await.unwrap_err().class(), Class::Transient);
}

#[tokio::test]
async fn an_answer_without_a_message_id_is_not_ok() {
    let server = start(Script::EmptyIds).await;
    let sink = server.sink().await;
    let env = envelope("noid-1", b"{}");
    let err = sink
        .deliver(&env, &Ctx::for_envelope(&env))
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Transient, "{err}");
}

#[tokio::test]
async fn the_scripted_server_accepts_and_check_passes() {
    let server = start(Script::Ok).await;
    let sink = server.sink().await;
    let env = envelope("ok-1", b"{}");
    sink.deliver(&env, &Ctx::for_envelope(&env)).await.unwrap();
    assert_eq!(sink.check().await.unwrap(), ankusa_sink_core::Check::Passed);
    let got = server.messages.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].attributes["ankusa_id"], "ok-1");
    assert_eq!(got[0].ordering_key, "");
}

#[tokio::test]
async fn batched_deliveries_share_requests_and_get_their_own_results() {
    let server = start(Script::Ok).await;
    let sink = server.sink().await;
    let envs: Vec<_> = (0..50)
        .map(|i| envelope(&format!("b-{i}"), b"{}"))
        .collect();
    let results = futures_util::future::join_all(envs.iter().map(|env| {
        let ctx = Ctx::for_envelope(env).with_batch(true);
        let sink = &sink;
        async move { sink.deliver(env, &ctx).await }
    }))
    .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let batched = server.publishes.load(Ordering::SeqCst);
    assert!(
        batched < 50,
        "50 batched deliveries took {batched} requests"
    );
    assert_eq!(server.messages.lock().unwrap().len(), 50);

    // Without ctx.batch: one request per hook.
    for env in envs.iter().take(3) {
        sink.deliver(env, &Ctx::for_envelope(env)).await.unwrap();
    }
    assert_eq!(server.publishes.load(Ordering::SeqCst), batched + 3);
}

/// A server on 127.0.0.1 that accepts and holds every connection, never answering.
async fn silent_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    addr
}

#[tokio::test]
async fn a_silent_server_fails_check_with_a_check_reason() {
    let addr = silent_server().await;
    let sink = PubSubSink::new(
        config_at("t-silent", format!("http://{addr}"))
            .with_timeout(Duration::from_millis(300))
            .unwrap(),
    )
    .await
    .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), sink.check())
        .await
        .expect("check is bounded by timeout_ms")
        .unwrap_err();
    assert_eq!(err.class(), Class::Transient, "{err}");
    // Check publishes nothing: its reason must not speak of a message id.
    assert_eq!(
        err.to_string(),
        "transient: check: getting the topic had no answer within 300 ms (nothing was published)"
    );
}

#[tokio::test]
async fn a_failed_subscription_listing_fails_check_and_strict_deliveries_by_its_status() {
    for (code, want) in [
        (Code::PermissionDenied, Class::Config),
        (Code::NotFound, Class::Config),
        (Code::Unavailable, Class::Transient),
    ] {
        let server = start(Script::ListFails(code)).await;
        let err = server.sink().await.check().await.unwrap_err();
        assert_eq!(err.class(), want, "{code:?}: {err}");
        assert!(
            err.to_string()
                .contains("listing the topic's subscriptions failed"),
            "{err}"
        );

        let strict = PubSubSink::new(
            config_at("scripted-topic", server.endpoint())
                .with_require_subscriber(true)
                .with_timeout(Duration::from_secs(5))
                .unwrap(),
        )
        .await
        .unwrap();
        let env = envelope("strict-1", b"{}");
        let err = strict
            .deliver(&env, &Ctx::for_envelope(&env))
            .await
            .unwrap_err();
        assert_eq!(err.class(), want, "{code:?}: {err}");
        assert_eq!(
            server.publishes.load(Ordering::SeqCst),
            0,
            "published anyway"
        );
    }
}

#[tokio::test]
async fn a_silent_server_fails_a_strict_delivery_with_a_listing_reason() {
    let addr = silent_server().await;
    let sink = PubSubSink::new(
        config_at("t-silent", format!("http://{addr}"))
            .with_require_subscriber(true)
            .with_timeout(Duration::from_millis(300))
            .unwrap(),
    )
    .await
    .unwrap();
    let env = envelope("silent-1", b"{}");
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        sink.deliver(&env, &Ctx::for_envelope(&env)),
    )
    .await
    .expect("the listing is bounded by timeout_ms")
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "transient: listing the topic's subscriptions had no answer within 300 ms \
         (nothing was published)"
    );
}
