//! One request at a time in front of the shared moto, for Kinesis.
//!
//! moto's Kinesis numbers a shard's records without a lock (`Shard.put_record` in
//! `moto/kinesis/models.py` takes the last sequence number plus one and stores the record
//! under it), and its server answers requests on threads: two puts to one shard at once can
//! take the same number, the second overwriting the first while both are answered with it,
//! and a read racing a put can fail while the shard's records change. Real Kinesis does
//! neither. Tests that write a stream concurrently and read it back go through this proxy,
//! which passes each HTTP request to moto and its answer back, one at a time, so what they
//! read back is what the sink wrote.

use std::sync::OnceLock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The proxy's endpoint, started on first use on a thread (and runtime) of its own, so it
/// outlives each test's runtime; it ends with the test process.
pub(crate) fn kinesis_moto() -> String {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT
        .get_or_init(|| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
            listener.set_nonblocking(true).expect("nonblocking");
            let endpoint = format!("http://{}", listener.local_addr().unwrap());
            let upstream = crate::common::moto()
                .trim_start_matches("http://")
                .to_owned();
            std::thread::Builder::new()
                .name("serial-moto".into())
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("the proxy's runtime");
                    rt.block_on(serve(listener, upstream));
                })
                .expect("the proxy's thread");
            endpoint
        })
        .clone()
}

async fn serve(listener: std::net::TcpListener, upstream: String) {
    let listener = TcpListener::from_std(listener).expect("a tokio listener");
    let turn = std::sync::Arc::new(tokio::sync::Mutex::new(()));
    loop {
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        let (turn, upstream) = (std::sync::Arc::clone(&turn), upstream.clone());
        tokio::spawn(async move {
            let _ = one_request(client, &turn, &upstream).await;
        });
    }
}

/// Read one request from `client`, pass it to moto on a connection of its own while
/// holding `turn`, return moto's answer and close the client's connection (the client
/// opens another for its next request).
async fn one_request(
    mut client: TcpStream,
    turn: &tokio::sync::Mutex<()>,
    upstream: &str,
) -> std::io::Result<()> {
    let Some(request) = read_message(&mut client).await? else {
        return Ok(());
    };
    let answer = {
        let _turn = turn.lock().await;
        let mut moto = TcpStream::connect(upstream).await?;
        moto.write_all(&request).await?;
        read_message(&mut moto).await?.unwrap_or_default()
    };
    client.write_all(&answer).await?;
    client.shutdown().await
}

/// One HTTP/1.1 message (head and `content-length` body) from `s`; `None` at a clean end.
async fn read_message(s: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 8192];
        match s.read(&mut chunk).await? {
            0 => return Ok(None),
            n => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len = head
        .split("\r\n")
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let mut chunk = [0u8; 65536];
        match s.read(&mut chunk).await? {
            0 => return Ok(None),
            n => buf.extend_from_slice(&chunk[..n]),
        }
    }
    buf.truncate(head_end + len);
    Ok(Some(buf))
}
