//! Minimal HTTP/1.x client pieces: the request text and an incremental
//! response reader that counts body bytes without keeping them.

/// Builds one GET request. `close` asks the server to close after answering
/// (always so for HTTP/1.0), so the server closes first and the TIME-WAIT
/// state lands on its side, not on the load generator's ports.
#[must_use]
pub fn request(host: &str, path: &str, http11: bool, close: bool) -> Vec<u8> {
    if http11 {
        let conn = if close { "close" } else { "keep-alive" };
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: dpbench\r\nConnection: {conn}\r\n\r\n")
            .into_bytes()
    } else {
        format!("GET {path} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: dpbench\r\n\r\n").into_bytes()
    }
}

/// Why a response was not acceptable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// Header block unparsable or over 16 KiB.
    BadHeader,
    /// Status other than 200.
    Status(u16),
}

/// State of one response being read.
#[derive(Debug, Default)]
pub struct ResponseReader {
    head: Vec<u8>,
    in_body: bool,
    status: u16,
    content_length: Option<u64>,
    body: u64,
    server_closes: bool,
}

/// What the bytes fed so far amount to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// More bytes are needed.
    More,
    /// The response is complete; `extra` bytes of the input were not used.
    Done { extra: usize },
}

impl ResponseReader {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Body bytes counted so far.
    #[must_use]
    pub fn body_len(&self) -> u64 {
        self.body
    }

    /// Content-Length announced, if any.
    #[must_use]
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// The server said it will close (HTTP/1.0 or `Connection: close`).
    #[must_use]
    pub fn server_closes(&self) -> bool {
        self.server_closes
    }

    /// Feeds bytes.
    ///
    /// # Errors
    /// [`HttpError`] when the header is bad or the status is not 200.
    pub fn feed(&mut self, data: &[u8]) -> Result<Progress, HttpError> {
        let mut data = data;
        if !self.in_body {
            let old = self.head.len();
            self.head.extend_from_slice(data);
            let Some(end) = find(&self.head, b"\r\n\r\n") else {
                if self.head.len() > 16 * 1024 {
                    return Err(HttpError::BadHeader);
                }
                return Ok(Progress::More);
            };
            let head_len = end + 4;
            self.parse_head(head_len)?;
            self.in_body = true;
            data = &data[head_len - old..];
            self.head.clear();
        }
        match self.content_length {
            Some(cl) => {
                let want = cl - self.body;
                let take = want.min(data.len() as u64);
                self.body += take;
                if self.body == cl {
                    Ok(Progress::Done {
                        extra: data.len() - take as usize,
                    })
                } else {
                    Ok(Progress::More)
                }
            }
            None => {
                self.body += data.len() as u64;
                Ok(Progress::More)
            }
        }
    }

    /// The peer closed. Returns whether the response is complete (a body
    /// without Content-Length ends here).
    #[must_use]
    pub fn eof_completes(&self) -> bool {
        self.in_body && self.content_length.is_none()
    }

    fn parse_head(&mut self, head_len: usize) -> Result<(), HttpError> {
        let text = std::str::from_utf8(&self.head[..head_len]).map_err(|_| HttpError::BadHeader)?;
        let mut lines = text.split("\r\n");
        let status_line = lines.next().ok_or(HttpError::BadHeader)?;
        let mut parts = status_line.split(' ');
        let proto = parts.next().ok_or(HttpError::BadHeader)?;
        if !proto.starts_with("HTTP/1.") {
            return Err(HttpError::BadHeader);
        }
        self.server_closes = proto == "HTTP/1.0";
        self.status = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or(HttpError::BadHeader)?;
        for line in lines {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let (k, v) = (k.trim(), v.trim());
            if k.eq_ignore_ascii_case("content-length") {
                self.content_length = Some(v.parse().map_err(|_| HttpError::BadHeader)?);
            } else if k.eq_ignore_ascii_case("connection") {
                if v.eq_ignore_ascii_case("close") {
                    self.server_closes = true;
                } else if v.eq_ignore_ascii_case("keep-alive") {
                    self.server_closes = false;
                }
            }
        }
        if self.status != 200 {
            return Err(HttpError::Status(self.status));
        }
        Ok(())
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_split_response() {
        let resp =
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhelloNEXT";
        for split in 1..resp.len() {
            let mut r = ResponseReader::new();
            let body_end = resp.len() - 4;
            let (progress, expected_extra) = match r.feed(&resp[..split]).unwrap() {
                Progress::More => (r.feed(&resp[split..]).unwrap(), 4),
                done => (done, split - body_end),
            };
            assert_eq!(
                progress,
                Progress::Done {
                    extra: expected_extra
                },
                "split {split}"
            );
            assert_eq!(r.body_len(), 5);
            assert!(!r.server_closes());
        }
    }

    #[test]
    fn http10_without_length_ends_at_eof() {
        let mut r = ResponseReader::new();
        assert_eq!(
            r.feed(b"HTTP/1.0 200 OK\r\n\r\nabc").unwrap(),
            Progress::More
        );
        assert!(r.eof_completes());
        assert!(r.server_closes());
        assert_eq!(r.body_len(), 3);
    }

    #[test]
    fn rejects_non_200() {
        let mut r = ResponseReader::new();
        assert_eq!(
            r.feed(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
            Err(HttpError::Status(404))
        );
    }

    #[test]
    fn short_body_is_not_complete_at_eof() {
        let mut r = ResponseReader::new();
        r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
            .unwrap();
        assert!(!r.eof_completes());
    }

    #[test]
    fn request_shapes() {
        let r = String::from_utf8(request("h", "/1k", false, true)).unwrap();
        assert!(r.starts_with("GET /1k HTTP/1.0\r\n"));
        let r = String::from_utf8(request("h", "/", true, false)).unwrap();
        assert!(r.contains("Connection: keep-alive"));
    }
}
