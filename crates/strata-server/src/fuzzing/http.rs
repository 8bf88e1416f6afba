//! `http`: request heads to the `/metrics` listener
//! (`ops::metrics_http`), arriving in pieces.
//!
//! Input: one byte choosing the piece sizes, then what the client sends.
//! Checked: never more than 8 KiB buffered and at most 16 parses however
//! the bytes are cut; a head to serve is answered once complete, and any
//! answer is the route of everything received; `/metrics` is
//! served only to `GET` or `HEAD` of that path; every reply head is one
//! HTTP/1.1 response with the route's status.

use crate::report::metrics_http::{response_head, route, Head, Route, CONTENT_TYPE, MAX_HEAD_BYTES};

pub fn http(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else { return };
    let mut head = Head::default();
    let mut answer = None;
    for range in super::chunks(seed, stream.len()) {
        let mut piece = &stream[range];
        while !piece.is_empty() && answer.is_none() {
            let spare = head.spare();
            assert!(!spare.is_empty(), "a full head without a route");
            let n = piece.len().min(spare.len());
            spare[..n].copy_from_slice(&piece[..n]);
            piece = &piece[n..];
            let before = head.bytes().len();
            answer = head.received(n);
            assert!(head.bytes().len() == before + n && head.bytes().len() <= MAX_HEAD_BYTES);
        }
        if answer.is_some() {
            break;
        }
    }
    let bytes = head.bytes();
    assert!(head.parses() <= 16, "{} parses of {} bytes", head.parses(), bytes.len());
    let Some(answer) = answer else {
        // A refusal may wait for a blank line or the head to double; a
        // head to serve ends with a blank line and is answered at once.
        assert!(!matches!(route(bytes), Some(Route::Metrics { .. })), "a complete head left unanswered");
        return;
    };
    match answer {
        Route::Refuse(431, _) => assert!(bytes.len() == MAX_HEAD_BYTES || route(bytes).is_some()),
        _ => assert_eq!(route(bytes).as_ref(), Some(&answer)),
    }
    if let Route::Metrics { head_only } = answer {
        let method: &[u8] = if head_only { b"HEAD" } else { b"GET" };
        // After the empty lines a server ignores before a request line.
        let start = bytes.iter().position(|&b| b != b'\r' && b != b'\n').unwrap_or(bytes.len());
        let bytes = &bytes[start..];
        let target = bytes.splitn(3, |&b| b == b' ').nth(1).unwrap_or_default();
        assert!(bytes.starts_with(method) && bytes.get(method.len()) == Some(&b' '), "served to {bytes:?}");
        assert!(target == b"/metrics" || target.starts_with(b"/metrics?"), "served {target:?}");
    }
    let (code, content_type, body_len) = match answer {
        Route::Metrics { .. } => (200, CONTENT_TYPE, 1234),
        Route::Refuse(code, text) => (code, "text/plain; charset=utf-8", text.len()),
    };
    let reply = response_head(code, content_type, body_len);
    let mut headers = [httparse::EMPTY_HEADER; 8];
    let mut parsed = httparse::Response::new(&mut headers);
    assert_eq!(parsed.parse(reply.as_bytes()), Ok(httparse::Status::Complete(reply.len())));
    assert_eq!(parsed.code, Some(code));
}

#[cfg(test)]
mod tests {
    /// The seeds of `fuzz/corpus/http`: what Prometheus and curl send
    /// (`STRATA_WRITE_CORPUS=1` rewrites the files).
    fn seeds() -> Vec<(&'static str, Vec<u8>)> {
        let many: String = (0..40).map(|i| format!("X-{i}: y\r\n")).collect();
        let long = format!("GET /metrics HTTP/1.1\r\nCookie: {}\r\n\r\n", "c".repeat(9000));
        let head = |text: &str| [&[0][..], text.as_bytes()].concat();
        let split = |text: &str| [&[3][..], text.as_bytes()].concat();
        vec![
            ("curl", head("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9150\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n")),
            ("prometheus", split("GET /metrics HTTP/1.1\r\nHost: localhost:9150\r\nUser-Agent: Prometheus/2.45.3\r\nAccept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\nAccept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n")),
            ("head-query", head("HEAD /metrics?name[]=x HTTP/1.0\r\n\r\n")),
            ("post", split("POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")),
            ("not-found", head("GET / HTTP/1.1\r\n\r\n")),
            ("partial", split("GET /metrics HTTP/1.1\r\nHost: x")),
            ("too-many-headers", head(&format!("GET /metrics HTTP/1.1\r\n{many}\r\n"))),
            ("too-long", split(&long)),
            ("memcached-on-http", head("get foo\r\n")),
            ("lf-only", head("GET /metrics HTTP/1.1\nHost: x\n\n")),
        ]
    }

    #[test]
    fn write_corpus() {
        super::super::tests::write_seeds("http", &seeds());
    }
}
