//! The request side of the loopback HTTP/1.1 servers that benches and tests answer
//! deliveries with, read by `httparse` rather than by hand.

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
}
