//! The request side of the loopback HTTP/1.1 servers that benches and tests answer
//! deliveries with, read by `httparse` rather than by hand.

use std::io::Read;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncReadExt as _, ReadBuf};

/// The head of one HTTP/1.1 request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead<'b> {
    /// Bytes of the head, the blank line included: the body starts here.
    pub len: usize,
    /// The request target (`/hooks/1`).
    pub path: &'b str,
    /// The `content-length` header's value; 0 without one.
    pub content_length: usize,
}

impl RequestHead<'_> {
    /// Bytes of the whole request, head and body.
    pub fn total_len(&self) -> usize {
        self.len + self.content_length
    }
}

/// The head of the request at the start of `buf`: `Ok(None)` until all of it has arrived.
///
/// # Errors
/// `buf` does not start with an HTTP/1.x request head (or one with over 64 headers).
pub fn request_head(buf: &[u8]) -> Result<Option<RequestHead<'_>>, httparse::Error> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(len) = req.parse(buf)? else {
        return Ok(None);
    };
    let content_length = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
        .unwrap_or(0);
    Ok(Some(RequestHead {
        len,
        path: req.path.unwrap_or(""),
        content_length,
    }))
}

/// The value of header `name` (any case) in the request head at the start of `buf`;
/// `None` without one, or when the head is incomplete or not HTTP/1.x.
pub fn request_header<'b>(buf: &'b [u8], name: &str) -> Option<&'b str> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    req.parse(buf).ok()?;
    let value = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))?
        .value;
    std::str::from_utf8(value).ok()
}

/// One whole request taken off the front of `buf`: its path and its body. `Ok(None)`, `buf`
/// untouched, until all of it has arrived; what follows it (a next request on a kept-alive
/// connection) stays in `buf`.
///
/// # Errors
/// `buf` does not start with an HTTP/1.x request head (see [`request_head`]).
pub fn take_request(buf: &mut Vec<u8>) -> Result<Option<(String, Vec<u8>)>, httparse::Error> {
    let Some(head) = request_head(buf)? else {
        return Ok(None);
    };
    let (body_at, total) = (head.len, head.total_len());
    if buf.len() < total {
        return Ok(None);
    }
    let path = head.path.to_owned();
    let body = buf[body_at..total].to_vec();
    buf.drain(..total);
    Ok(Some((path, body)))
}

/// Reads from `conn` into `buf` until a whole request has arrived, and takes it
/// ([`take_request`]): `None` when the connection ends first, fails, or does not speak
/// HTTP/1.x.
pub async fn read_request<R: AsyncRead + Unpin>(
    conn: &mut R,
    buf: &mut Vec<u8>,
) -> Option<(String, Vec<u8>)> {
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(request) = take_request(buf).ok()? {
            return Some(request);
        }
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// [`read_request`] for a blocking `conn` (a `std::net::TcpStream`).
pub fn read_request_blocking<R: Read + Unpin>(
    conn: &mut R,
    buf: &mut Vec<u8>,
) -> Option<(String, Vec<u8>)> {
    let mut conn = Blocking(conn);
    let mut reading = pin!(read_request(&mut conn, buf));
    match reading
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(request) => request,
        Poll::Pending => unreachable!("a blocking read is never pending"),
    }
}

/// A blocking reader as an [`AsyncRead`] whose reads are always ready (they block instead).
struct Blocking<'r, R>(&'r mut R);

impl<R: Read + Unpin> AsyncRead for Blocking<'_, R> {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self.get_mut().0.read(buf.initialize_unfilled())?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_arrives_in_pieces_then_parses() {
        let req = b"POST /hooks/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(request_head(&req[..20]).unwrap(), None);
        let head = request_head(req).unwrap().unwrap();
        assert_eq!(head.path, "/hooks/1");
        assert_eq!((head.len, head.content_length), (req.len() - 5, 5));
        assert_eq!(head.total_len(), req.len());
        assert!(request_head(b"\x16\x03\x01 not http\r\n\r\n").is_err());
        assert_eq!(request_header(req, "content-length"), Some("5"));
        assert_eq!(request_header(req, "X-Amz-Target"), None);
    }

    #[test]
    fn a_request_is_taken_whole_and_what_follows_stays() {
        let two = b"POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\n\r\n";
        let mut buf = two[..40].to_vec();
        assert_eq!(take_request(&mut buf).unwrap(), None);
        assert_eq!(buf, &two[..40]);
        let mut buf = two.to_vec();
        assert_eq!(
            take_request(&mut buf).unwrap(),
            Some(("/a".to_owned(), b"hello".to_vec()))
        );
        assert_eq!(
            read_request_blocking(&mut &b""[..], &mut buf),
            Some(("/b".to_owned(), Vec::new()))
        );
        assert!(buf.is_empty());
        // The connection ends with the body half sent.
        let mut conn = &two[..42];
        assert_eq!(read_request_blocking(&mut conn, &mut buf), None);
        assert_eq!(
            read_request_blocking(&mut &b"\x16\x03\x01 tls\r\n\r\n"[..], &mut Vec::new()),
            None
        );
    }
}
