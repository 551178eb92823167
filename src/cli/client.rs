//! A minimal HTTP/1.1 client for the agent API's unix socket: one `GET` per connection
//! (`Connection: close`), reading a `Content-Length` or chunked body. Blocking std I/O with a
//! timeout; nothing else is needed for local JSON requests.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to the agent API at {path}: {source} (is the agent running? are you root?)")]
    Connect { path: String, source: std::io::Error },
    #[error("agent API at {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("agent API at {path}: malformed HTTP response: {what}")]
    Malformed { path: String, what: String },
}

/// A response: status code and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// `GET path_and_query` on the unix socket `socket`.
pub fn get(socket: &Path, path_and_query: &str, timeout: Duration) -> Result<Response, ClientError> {
    let shown = socket.display().to_string();
    let io = |source| ClientError::Io {
        path: shown.clone(),
        source,
    };
    let mut stream = UnixStream::connect(socket).map_err(|source| ClientError::Connect {
        path: shown.clone(),
        source,
    })?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let request = format!(
        "GET {path_and_query} HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(io)?;
    parse_response(&raw).map_err(|what| ClientError::Malformed { path: shown, what })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Parses a complete HTTP/1.1 response.
pub fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let head_end = find(raw, b"\r\n\r\n").ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| "headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("empty response")?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut content_length = None;
    let mut chunked = false;
    for line in lines {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "content-length" {
            content_length = Some(v.parse::<usize>().map_err(|_| "bad Content-Length")?);
        } else if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
            chunked = true;
        }
    }
    let rest = &raw[head_end + 4..];
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(n) = content_length {
        rest.get(..n).ok_or("body shorter than Content-Length")?.to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response { status, body })
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = find(data, b"\r\n").ok_or("truncated chunk size")?;
        let size_text = std::str::from_utf8(&data[..line_end]).map_err(|_| "bad chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size =
            usize::from_str_radix(size_text, 16).map_err(|_| format!("bad chunk size {size_text:?}"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(data.get(..size).ok_or("truncated chunk")?);
        data = data.get(size + 2..).ok_or("truncated chunk end")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_content_length_and_chunked_bodies() {
        let r = parse_response(b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}extra").expect("parse");
        assert_eq!(r.status, 404);
        assert_eq!(r.body, b"{}");
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
        )
        .expect("parse");
        assert_eq!(r.body, b"abcde");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse_response(b"garbage\r\n\r\n").is_err());
    }

    #[test]
    fn a_missing_socket_says_so() {
        let e = get(
            Path::new("/nonexistent/agent.sock"),
            "/agentinfo",
            Duration::from_secs(1),
        )
        .expect_err("no socket");
        assert!(
            e.to_string()
                .contains("cannot connect to the agent API at /nonexistent/agent.sock"),
            "{e}"
        );
    }
}
