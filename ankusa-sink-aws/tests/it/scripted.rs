//! A scripted HTTP/1.1 server on 127.0.0.1 answering in the real AWS error shapes, for
//! what moto cannot produce (throttling, 5xx, per-entry batch failures, bad MD5s, hangs),
//! parsed by the real SDKs: SQS and Kinesis/EventBridge JSON, SNS query/XML.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as received.
#[derive(Debug, Clone)]
pub(crate) struct Req {
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Req {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
    /// The operation, from `x-amz-target` (`Kinesis_20131202.PutRecords` -> `PutRecords`).
    pub(crate) fn operation(&self) -> &str {
        self.header("x-amz-target")
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or_default()
    }
}

/// A response; `hang` never answers.
#[derive(Debug, Clone)]
pub(crate) struct Resp {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    pub(crate) hang: bool,
}

impl Resp {
    pub(crate) fn new(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Resp {
            status,
            headers: Vec::new(),
            body: body.into(),
            hang: false,
        }
    }
    /// A 403 whose body is not JSON (moto's IAM answers are XML).
    pub(crate) fn xml_access_denied() -> Self {
        Resp::new(
            403,
            "<ErrorResponse><Error><Code>AccessDenied</Code></Error></ErrorResponse>",
        )
        .header("content-type", "text/xml")
    }
    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
    pub(crate) fn hang() -> Self {
        Resp {
            hang: true,
            ..Resp::new(200, "")
        }
    }

    /// An SQS JSON 1.0 protocol error: `__type`, the query-compatible code header, message.
    pub(crate) fn sqs_error(status: u16, code: &str, query_code: &str) -> Self {
        let body = serde_json::json!({
            "__type": format!("com.amazonaws.sqs#{code}"),
            "message": format!("scripted {code}"),
        });
        let fault = if status >= 500 { "Receiver" } else { "Sender" };
        Resp::new(status, body.to_string())
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amzn-query-error", &format!("{query_code};{fault}"))
            .header("x-amzn-requestid", "scripted-request")
    }

    /// An SQS JSON success body.
    pub(crate) fn sqs_ok(body: serde_json::Value) -> Self {
        Resp::new(200, body.to_string())
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amzn-requestid", "scripted-request")
    }

    /// A Kinesis or EventBridge (AWS JSON 1.1 protocol) error: `__type` and message.
    pub(crate) fn json11_error(status: u16, code: &str) -> Self {
        let body = serde_json::json!({"__type": code, "message": format!("scripted {code}")});
        Resp::new(status, body.to_string())
            .header("content-type", "application/x-amz-json-1.1")
            .header("x-amzn-requestid", "scripted-request")
    }

    /// A Kinesis or EventBridge (AWS JSON 1.1) success body.
    pub(crate) fn json11_ok(body: serde_json::Value) -> Self {
        Resp::new(200, body.to_string())
            .header("content-type", "application/x-amz-json-1.1")
            .header("x-amzn-requestid", "scripted-request")
    }

    /// An SNS query-protocol (XML) error.
    pub(crate) fn sns_error(status: u16, code: &str) -> Self {
        let fault = if status >= 500 { "Receiver" } else { "Sender" };
        let body = format!(
            "<ErrorResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><Error>\
             <Type>{fault}</Type><Code>{code}</Code><Message>scripted {code}</Message>\
             </Error><RequestId>scripted-request</RequestId></ErrorResponse>"
        );
        Resp::new(status, body).header("content-type", "text/xml")
    }
}

type Handler = dyn Fn(&Req) -> Resp + Send + Sync;

/// One request served at a time, each taking this long.
type Queueing = Option<(Arc<tokio::sync::Mutex<()>>, Duration)>;

/// The server; requests are recorded in order.
pub(crate) struct Scripted {
    pub(crate) addr: SocketAddr,
    pub(crate) requests: Arc<Mutex<Vec<Req>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Scripted {
    pub(crate) async fn start(handler: impl Fn(&Req) -> Resp + Send + Sync + 'static) -> Self {
        Self::serving(handler, None).await
    }

    /// A server that answers one request at a time, each `service_time` after its turn
    /// comes: a destination that queues requests instead of serving them in parallel
    /// (moto, an overloaded endpoint), so a request's round trip grows with those ahead.
    pub(crate) async fn start_queueing(
        service_time: Duration,
        handler: impl Fn(&Req) -> Resp + Send + Sync + 'static,
    ) -> Self {
        let turn = Arc::new(tokio::sync::Mutex::new(()));
        Self::serving(handler, Some((turn, service_time))).await
    }

    async fn serving(
        handler: impl Fn(&Req) -> Resp + Send + Sync + 'static,
        queueing: Queueing,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let recorded = Arc::clone(&requests);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let handler = Arc::clone(&handler);
                let recorded = Arc::clone(&recorded);
                tokio::spawn(serve(stream, handler, recorded, queueing.clone()));
            }
        });
        Scripted {
            addr,
            requests,
            task,
        }
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

async fn serve(
    mut stream: TcpStream,
    handler: Arc<Handler>,
    recorded: Arc<Mutex<Vec<Req>>>,
    queueing: Queueing,
) {
    let mut buf = Vec::new();
    loop {
        // Headers.
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let headers: Vec<(String, String)> = head
            .split("\r\n")
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let len = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < head_end + len {
            let mut chunk = [0u8; 65536];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let req = Req {
            headers,
            body: buf[head_end..head_end + len].to_vec(),
        };
        buf.drain(..head_end + len);
        if let Some((turn, service_time)) = &queueing {
            let _served = turn.lock().await;
            tokio::time::sleep(*service_time).await;
        }
        let resp = handler(&req);
        recorded.lock().unwrap().push(req);
        if resp.hang {
            std::future::pending::<()>().await;
        }
        let mut out = format!(
            "HTTP/1.1 {} Scripted\r\ncontent-length: {}\r\n",
            resp.status,
            resp.body.len()
        );
        for (n, v) in &resp.headers {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(&resp.body);
        if stream.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

/// The lowercase hex MD5 of `s`.
pub(crate) fn md5_hex(s: &str) -> String {
    use md5::Digest as _;
    hex::encode(md5::Md5::digest(s.as_bytes()))
}
