//! One attempt of a webhook delivery over HTTP/1.1: the request (flo's headers, the
//! signature, the user's headers), a pooled keep-alive client (hyper-util's, over
//! hyper-rustls for https: ring, the Mozilla roots built in) and what the receiver
//! answered — its status, or a short text saying why no answer came.
//!
//! Per attempt: one request, one pooled connection (a new one costs a TCP and, for https,
//! a TLS handshake), the body shared with the engine's (no copy), the answer's body read
//! and dropped up to `ANSWER_BODY_BYTES_MAX` so that the connection goes back to the pool.

use flo_engine::WebhookCall;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderName, HeaderValue, USER_AGENT};
use hyper::{Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use sha2::Sha256;
use std::error::Error;
use std::fmt::Write;
use std::io;
use std::time::Duration;

/// Bytes of a receiver's answer read (and dropped); beyond, the connection is closed
/// instead of going back to the pool.
const ANSWER_BODY_BYTES_MAX: usize = 64 << 10;
/// hyper's read buffer for an answer: its status line and headers must fit.
const ANSWER_BUFFER_BYTES_MAX: usize = 64 << 10;
/// An idle connection is kept this long for the next delivery to the same receiver.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Idle connections kept per receiver (host and port): as many as may be in flight, so
/// that a busy receiver is not reconnected to for every delivery.
const POOL_IDLE_PER_HOST_MAX: usize = REQUESTS_INFLIGHT_MAX;
/// Requests in flight at once, over all shards (the thread's permits).
pub(super) const REQUESTS_INFLIGHT_MAX: usize = 256;
/// Longest error text sent back to the engine (it is kept in the delivery's history).
const ERROR_TEXT_BYTES_MAX: usize = 512;
const USER_AGENT_VALUE: &str = concat!("flo/", env!("CARGO_PKG_VERSION"));

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// The delivery thread's HTTP client: its pool of connections to the receivers. Cheap to
/// clone (the clones share the pool).
#[derive(Clone)]
pub(super) struct Client {
    http: hyper_util::client::legacy::Client<Connector, Full<Bytes>>,
}

impl Client {
    /// A client for http and https URLs. Needs no runtime to be built; it runs on the
    /// tokio runtime of the task that uses it.
    pub fn new() -> io::Result<Client> {
        let provider = rustls::crypto::ring::default_provider();
        let mut tcp = HttpConnector::new();
        // https URLs too: the TLS layer above checks the scheme.
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(provider)
            .map_err(io::Error::other)?
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_max_idle_per_host(POOL_IDLE_PER_HOST_MAX)
            .http1_max_buf_size(ANSWER_BUFFER_BYTES_MAX)
            // `X-Flo-Delivery`, as documented, for receivers that match names by case.
            .http1_title_case_headers(true)
            .build(connector);
        Ok(Client { http })
    }

    /// Sends one attempt and returns the receiver's status (redirects are not followed),
    /// or why none came within `call.timeout_ms` (connection, TLS handshake, request and
    /// the answer's head; the time starts now).
    pub async fn deliver(&self, call: &WebhookCall) -> Result<u16, String> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(call.timeout_ms);
        let request = request(call).map_err(short)?;
        let response = match tokio::time::timeout_at(deadline, self.http.request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(short(describe(&e, &call.url))),
            Err(_) => return Err(format!("no answer within {} ms", call.timeout_ms)),
        };
        let status = response.status().as_u16();
        // The status is the answer; a body that does not come in time only costs the
        // connection (dropped, not pooled).
        let _ = tokio::time::timeout_at(deadline, drain(response.into_body())).await;
        Ok(status)
    }
}

/// The request of one attempt: `POST call.url` with the call's body, flo's headers, the
/// signature when the call has a secret, then the user's headers.
fn request(call: &WebhookCall) -> Result<Request<Full<Bytes>>, String> {
    let uri = target(&call.url)?;
    let body = Full::new(Bytes::from_owner(call.body.clone()));
    let mut request = Request::post(uri)
        .body(body)
        .map_err(|e| format!("invalid request to {}: {e}", call.url))?;
    let headers = request.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
    headers.insert(
        "x-flo-delivery",
        header_value("X-Flo-Delivery", &call.delivery_id)?,
    );
    headers.insert("x-flo-event", header_value("X-Flo-Event", call.event)?);
    headers.insert("x-flo-attempt", HeaderValue::from(call.attempt));
    if let Some(secret) = &call.secret {
        let signature = signature(secret.as_bytes(), &call.body);
        headers.insert(
            "x-flo-signature",
            header_value("X-Flo-Signature", &signature)?,
        );
    }
    for (name, value) in &call.headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("invalid header name {name:?}"))?;
        headers.append(header, header_value(name, value)?);
    }
    Ok(request)
}

/// `url` if it is an absolute http or https URL with a host.
fn target(url: &str) -> Result<Uri, String> {
    let uri: Uri = url.parse().map_err(|e| format!("invalid URL {url}: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!(
            "invalid URL {url}: it must start with http:// or https://"
        ));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("invalid URL {url}: it has no host"));
    }
    Ok(uri)
}

fn header_value(name: &str, value: &str) -> Result<HeaderValue, String> {
    HeaderValue::from_str(value)
        .map_err(|_| format!("invalid value for header {name}: control characters or non-ASCII"))
}

/// `sha256=` and the lowercase hex of HMAC-SHA256 of `body` keyed with `secret`: the
/// value of `X-Flo-Signature`.
pub(super) fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut text = String::with_capacity("sha256=".len() + 2 * digest.len());
    text.push_str("sha256=");
    for byte in digest {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

/// Reads the answer's body and drops it, up to `ANSWER_BODY_BYTES_MAX` (a connection whose
/// body was not read whole is closed when the body is dropped).
async fn drain(mut body: Incoming) {
    let mut read = 0;
    while read <= ANSWER_BODY_BYTES_MAX {
        let Some(Ok(frame)) = body.frame().await else {
            return;
        };
        read += frame.data_ref().map_or(0, Bytes::len);
    }
}

/// Why no answer came, in a few words, with the URL: `connection refused (URL)`, `cannot
/// connect: CAUSE (URL)` (DNS, TLS), or the cause (a connection closed before the answer).
fn describe(e: &hyper_util::client::legacy::Error, url: &str) -> String {
    let mut innermost: &dyn Error = e;
    let mut refused = false;
    let mut source = e.source();
    while let Some(cause) = source {
        refused |= cause
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::ConnectionRefused);
        innermost = cause;
        source = cause.source();
    }
    if refused {
        format!("connection refused ({url})")
    } else if e.is_connect() {
        format!("cannot connect: {innermost} ({url})")
    } else {
        format!("{innermost} ({url})")
    }
}

/// `text` within `ERROR_TEXT_BYTES_MAX` (cut at a character boundary).
fn short(mut text: String) -> String {
    if text.len() > ERROR_TEXT_BYTES_MAX {
        let mut end = ERROR_TEXT_BYTES_MAX - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_in_lowercase_hex() {
        // RFC 4231, test case 2.
        let signed = signature(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            signed,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn only_absolute_http_and_https_urls_are_sent_to() {
        assert!(target("http://127.0.0.1:9/x").is_ok());
        assert!(target("https://example.com/hook?a=1").is_ok());
        for bad in [
            "not a url",
            "/relative",
            "ftp://example.com/x",
            "http:///x",
            "",
        ] {
            let e = target(bad).unwrap_err();
            assert!(e.starts_with("invalid URL"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_long_error_text_is_cut_at_a_character_boundary() {
        let cut = short("é".repeat(ERROR_TEXT_BYTES_MAX));
        assert!(cut.len() <= ERROR_TEXT_BYTES_MAX);
        assert!(cut.ends_with('…'));
        assert_eq!(short("short".into()), "short");
    }
}
