//! A fast SQS and SNS on 127.0.0.1, in the bench's process, on a thread of its own: what
//! the sink and the raw SDK cost when the server is not moto (one Python process whose SQS
//! rescans a queue on every send). It speaks the wire protocols the SDKs speak (SQS: JSON,
//! `X-Amz-Target: AmazonSQS.<Action>`; SNS: the query protocol, form in, XML out), answers
//! `SendMessage`/`SendMessageBatch` with the real `MD5OfMessageBody` and
//! `MD5OfMessageAttributes`, and counts what each queue or topic received, so a run can be
//! checked to have delivered every message. It keeps no message.

use ankusa_bench_support::http::{request_head, request_header};
use md5::{Digest as _, Md5};
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// The account in queue URLs and topic ARNs.
const ACCOUNT: &str = "123456789012";
/// SQS and SNS take at most ten entries per batch request.
const MAX_BATCH: usize = 10;

/// The running server.
pub(crate) struct FastAws {
    endpoint: String,
    state: Arc<State>,
}

struct State {
    endpoint: String,
    /// Messages received per queue URL / topic ARN.
    received: Mutex<HashMap<String, usize>>,
    next_id: AtomicU64,
}

impl FastAws {
    /// Start it on a free loopback port, served by one thread (a current-thread runtime).
    pub(crate) fn start() -> FastAws {
        self_check();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(State {
            endpoint: endpoint.clone(),
            received: Mutex::default(),
            next_id: AtomicU64::new(1),
        });
        let st = Arc::clone(&state);
        std::thread::Builder::new()
            .name("fast-aws".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the server's runtime");
                rt.block_on(async move {
                    let listener = TcpListener::from_std(listener).expect("tokio listener");
                    loop {
                        let Ok((stream, _)) = listener.accept().await else {
                            continue;
                        };
                        let _ = stream.set_nodelay(true);
                        tokio::spawn(serve(stream, Arc::clone(&st)));
                    }
                });
            })
            .expect("spawn the server thread");
        FastAws { endpoint, state }
    }

    /// `http://127.0.0.1:PORT`.
    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Messages `dest` (a queue URL or topic ARN) has received.
    pub(crate) fn received(&self, dest: &str) -> usize {
        self.state.received().get(dest).copied().unwrap_or(0)
    }
}

impl State {
    fn received(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.received.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn count(&self, dest: &str, n: usize) {
        let mut received = self.received();
        match received.get_mut(dest) {
            Some(count) => *count += n,
            None => {
                received.insert(dest.to_owned(), n);
            }
        }
    }

    fn message_id(&self) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("00000000-0000-4000-8000-{n:012x}")
    }
}

/// An answer: status, content type, body.
struct Answer {
    status: u16,
    content_type: &'static str,
    body: String,
}

/// One keep-alive connection: requests answered in order.
async fn serve(mut stream: TcpStream, st: Arc<State>) {
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(4 * 1024);
    loop {
        let (head_len, total, target) = loop {
            match request_head(&buf) {
                Ok(Some(head)) if buf.len() >= head.total_len() => {
                    let target = request_header(&buf, "x-amz-target").map(str::to_owned);
                    break (head.len, head.total_len(), target);
                }
                Ok(_) => {}
                Err(_) => return,
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let body = &buf[head_len..total];
        let answer = match target.as_deref().and_then(|t| t.strip_prefix("AmazonSQS.")) {
            Some(action) => sqs(&st, action, body),
            None => sns(&st, body),
        };
        out.clear();
        let reason = if answer.status == 200 {
            "OK"
        } else {
            "Bad Request"
        };
        write!(
            Str(&mut out),
            "HTTP/1.1 {} {reason}\r\ncontent-type: {}\r\nx-amzn-requestid: {}\r\ncontent-length: {}\r\n\r\n",
            answer.status,
            answer.content_type,
            st.message_id(),
            answer.body.len()
        )
        .expect("writing to a Vec");
        out.extend_from_slice(answer.body.as_bytes());
        if stream.write_all(&out).await.is_err() {
            return;
        }
        buf.drain(..total);
    }
}

/// `fmt::Write` into bytes.
struct Str<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Str<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

// ---- SQS (JSON protocol) ----

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SqsRequest<'a> {
    #[serde(borrow, default)]
    queue_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    queue_url: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message_body: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message_attributes: BTreeMap<Cow<'a, str>, SqsAttribute<'a>>,
    #[serde(borrow, default)]
    entries: Vec<SqsEntry<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SqsEntry<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    message_body: Cow<'a, str>,
    #[serde(borrow, default)]
    message_attributes: BTreeMap<Cow<'a, str>, SqsAttribute<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SqsAttribute<'a> {
    #[serde(borrow)]
    data_type: Cow<'a, str>,
    #[serde(borrow, default)]
    string_value: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    binary_value: Option<Cow<'a, str>>,
}

fn sqs_error(code: &str, message: &str) -> Answer {
    Answer {
        status: 400,
        content_type: "application/x-amz-json-1.0",
        body:
            serde_json::json!({"__type": format!("com.amazonaws.sqs#{code}"), "message": message})
                .to_string(),
    }
}

fn sqs_ok(body: serde_json::Value) -> Answer {
    Answer {
        status: 200,
        content_type: "application/x-amz-json-1.0",
        body: body.to_string(),
    }
}

fn sqs(st: &State, action: &str, body: &[u8]) -> Answer {
    let req: SqsRequest<'_> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return sqs_error("InvalidParameterValue", &e.to_string()),
    };
    let url = req.queue_url.as_deref().unwrap_or("");
    match action {
        "CreateQueue" => {
            let name = req.queue_name.as_deref().unwrap_or("");
            let url = format!("{}/{ACCOUNT}/{name}", st.endpoint);
            st.count(&url, 0);
            sqs_ok(serde_json::json!({ "QueueUrl": url }))
        }
        "DeleteQueue" => sqs_ok(serde_json::json!({})),
        "GetQueueAttributes" => {
            let name = url.rsplit('/').next().unwrap_or("");
            sqs_ok(serde_json::json!({"Attributes": {
                "QueueArn": format!("arn:aws:sqs:us-east-1:{ACCOUNT}:{name}")}}))
        }
        "SendMessage" => {
            let Some(body) = req.message_body.as_deref() else {
                return sqs_error("MissingParameter", "MessageBody");
            };
            match accepted(st, body, &req.message_attributes) {
                Ok(out) => {
                    st.count(url, 1);
                    sqs_ok(out)
                }
                Err(refused) => refused,
            }
        }
        "SendMessageBatch" => {
            if req.entries.is_empty() || req.entries.len() > MAX_BATCH {
                return sqs_error("TooManyEntriesInBatchRequest", "1 to 10 entries");
            }
            let mut ok = Vec::with_capacity(req.entries.len());
            for e in &req.entries {
                match accepted(st, &e.message_body, &e.message_attributes) {
                    Ok(mut r) => {
                        r["Id"] = e.id.as_ref().into();
                        ok.push(r);
                    }
                    Err(refused) => return refused,
                }
            }
            st.count(url, ok.len());
            sqs_ok(serde_json::json!({"Successful": ok, "Failed": []}))
        }
        other => sqs_error("InvalidAction", other),
    }
}

/// What SQS answers for one message it took (`SendMessage`, or an entry of a batch
/// without its `Id`): a message id and the digests; a binary attribute is refused.
fn accepted(
    st: &State,
    body: &str,
    attributes: &BTreeMap<Cow<'_, str>, SqsAttribute<'_>>,
) -> Result<serde_json::Value, Answer> {
    let Some(attrs) = attributes_md5(attributes) else {
        return Err(sqs_error("InvalidParameterValue", "binary attributes"));
    };
    let mut out = serde_json::json!({
        "MessageId": st.message_id(), "MD5OfMessageBody": md5_hex(body.as_bytes())});
    if let Some(a) = attrs {
        out["MD5OfMessageAttributes"] = a.into();
    }
    Ok(out)
}

/// Lowercase hex MD5, as SQS reports it (the bench's client side computes it the same way).
pub(crate) fn md5_hex(bytes: &[u8]) -> String {
    hex::encode(Md5::digest(bytes))
}

/// SQS's `MD5OfMessageAttributes`: over the attributes sorted by name, each as its name,
/// its data type (each a 4-byte big-endian length, then the bytes), the transport type
/// (1 for String and Number), then its value the same way. `None` (outer) for a binary
/// attribute, which this server does not take; `Some(None)` without attributes.
fn attributes_md5(attrs: &BTreeMap<Cow<'_, str>, SqsAttribute<'_>>) -> Option<Option<String>> {
    if attrs.is_empty() {
        return Some(None);
    }
    fn put(h: &mut Md5, b: &[u8]) {
        h.update(u32::try_from(b.len()).expect("under 4 GiB").to_be_bytes());
        h.update(b);
    }
    let mut h = Md5::new();
    for (name, a) in attrs {
        if a.binary_value.is_some() {
            return None;
        }
        put(&mut h, name.as_bytes());
        put(&mut h, a.data_type.as_bytes());
        h.update([1u8]);
        put(&mut h, a.string_value.as_deref().unwrap_or("").as_bytes());
    }
    Some(Some(hex::encode(h.finalize())))
}

/// The attribute digest against one moto computes for the same attributes (its
/// `Message.attribute_md5`, the algorithm of the SQS documentation).
fn self_check() {
    let attrs: BTreeMap<Cow<'_, str>, SqsAttribute<'_>> = serde_json::from_str(
        r#"{"ankusa_id": {"DataType": "String", "StringValue": "h1"},
            "content_type": {"DataType": "String", "StringValue": "application/json"},
            "b": {"DataType": "Number", "StringValue": "5"}}"#,
    )
    .expect("attributes");
    assert_eq!(
        attributes_md5(&attrs),
        Some(Some("59f9a0c926400b46a6dca0de4fb4b5dd".to_owned())),
        "MD5OfMessageAttributes"
    );
}

// ---- SNS (query protocol) ----

const SNS_NS: &str = "http://sns.amazonaws.com/doc/2010-03-31/";

fn sns_xml(action: &str, result: &str) -> Answer {
    Answer {
        status: 200,
        content_type: "text/xml",
        body: format!(
            "<{action}Response xmlns=\"{SNS_NS}\"><{action}Result>{result}</{action}Result>\
             <ResponseMetadata><RequestId>fast-aws</RequestId></ResponseMetadata></{action}Response>"
        ),
    }
}

fn sns_error(code: &str, message: &str) -> Answer {
    Answer {
        status: 400,
        content_type: "text/xml",
        body: format!(
            "<ErrorResponse xmlns=\"{SNS_NS}\"><Error><Type>Sender</Type><Code>{code}</Code>\
             <Message>{message}</Message></Error><RequestId>fast-aws</RequestId></ErrorResponse>"
        ),
    }
}

/// A query-protocol form with its values left encoded: the server reads a few short
/// fields and only checks that each message is there, so it decodes nothing else (a real
/// SNS does that work on its own machines, not on the cores the clients share with it).
struct Form<'a> {
    fields: Vec<(&'a [u8], &'a [u8])>,
}

impl<'a> Form<'a> {
    fn parse(body: &'a [u8]) -> Form<'a> {
        let fields = body
            .split(|&b| b == b'&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| match pair.iter().position(|&b| b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &b""[..]),
            })
            .collect();
        Form { fields }
    }

    /// The raw (still encoded) value of `name`. The SDKs send names unencoded.
    fn raw(&self, name: &str) -> Option<&'a [u8]> {
        self.fields
            .iter()
            .find(|(k, _)| *k == name.as_bytes())
            .map(|(_, v)| *v)
    }

    /// The decoded value of `name`.
    fn get(&self, name: &str) -> Option<String> {
        self.raw(name).map(decode)
    }
}

/// A form value, decoded as the form encoding says (`+` a space, `%XX` a byte).
fn decode(v: &[u8]) -> String {
    let mut pair = Vec::with_capacity(v.len() + 1);
    pair.push(b'=');
    pair.extend_from_slice(v);
    url::form_urlencoded::parse(&pair)
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// `PublishBatch`'s entries, numbered from 1 as the form names them: each one's `Id`
/// (decoded) and whether it has a `Message`. `Err` for a number outside 1 to 10.
fn batch_entries(form: &Form<'_>) -> Result<Vec<(Option<String>, bool)>, Answer> {
    const PREFIX: &[u8] = b"PublishBatchRequestEntries.member.";
    let mut entries: Vec<(Option<String>, bool)> = Vec::new();
    for (k, v) in &form.fields {
        let Some(rest) = k.strip_prefix(PREFIX) else {
            continue;
        };
        let dot = rest.iter().position(|&b| b == b'.').unwrap_or(rest.len());
        let n: usize = std::str::from_utf8(&rest[..dot])
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        if n == 0 || n > MAX_BATCH {
            return Err(sns_error("TooManyEntriesInBatchRequest", "1 to 10 entries"));
        }
        if entries.len() < n {
            entries.resize(n, (None, false));
        }
        match &rest[dot..] {
            b".Id" => entries[n - 1].0 = Some(decode(v)),
            b".Message" => entries[n - 1].1 = true,
            _ => {}
        }
    }
    Ok(entries)
}

fn sns(st: &State, body: &[u8]) -> Answer {
    let form = Form::parse(body);
    let topic = form.get("TopicArn").unwrap_or_default();
    match form.raw("Action").unwrap_or_default() {
        b"CreateTopic" => {
            let arn = format!(
                "arn:aws:sns:us-east-1:{ACCOUNT}:{}",
                form.get("Name").unwrap_or_default()
            );
            st.count(&arn, 0);
            sns_xml("CreateTopic", &format!("<TopicArn>{arn}</TopicArn>"))
        }
        b"DeleteTopic" => sns_xml("DeleteTopic", ""),
        b"Publish" => {
            if form.raw("Message").is_none() {
                return sns_error("InvalidParameter", "Message");
            }
            st.count(&topic, 1);
            sns_xml(
                "Publish",
                &format!("<MessageId>{}</MessageId>", st.message_id()),
            )
        }
        b"PublishBatch" => {
            let entries = match batch_entries(&form) {
                Ok(e) => e,
                Err(refused) => return refused,
            };
            if entries.is_empty() {
                return sns_error("EmptyBatchRequest", "no entries");
            }
            let mut members = String::new();
            for (id, has_message) in &entries {
                let (Some(id), true) = (id, has_message) else {
                    return sns_error("InvalidParameter", "Id and Message");
                };
                write!(
                    members,
                    "<member><Id>{id}</Id><MessageId>{}</MessageId></member>",
                    st.message_id()
                )
                .expect("writing to a String");
            }
            st.count(&topic, entries.len());
            sns_xml(
                "PublishBatch",
                &format!("<Successful>{members}</Successful><Failed/>"),
            )
        }
        other => sns_error("InvalidAction", &String::from_utf8_lossy(other)),
    }
}
