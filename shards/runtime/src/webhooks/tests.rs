//! The delivery thread against receivers on 127.0.0.1: what a receiver gets, what comes
//! back to the shard for each kind of answer (or none), keep-alive, the bound on requests
//! in flight, and the answers while the server stops.

use super::client::{Client, signature};
use super::thread::{Answer, REQUESTS_INFLIGHT_MAX, STOPPING, ShardWebhooks, channels, serve};
use crate::inbox::Inbox;
use crate::metrics::ShardMetrics;
use flo_engine::{Input, WebhookCall};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// Longest a test waits for an answer before it fails.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// How a test receiver answers each request.
#[derive(Clone, Copy)]
enum Behaviour {
    /// With this status and a short body.
    Status(u16),
    /// After this delay, with 200.
    Slow(Duration),
    /// Never: it reads the request and keeps the connection open.
    Silent,
}

/// A request as a receiver read it: header names in lowercase.
struct Received {
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// An HTTP/1.1 receiver on 127.0.0.1 (a thread per connection, several requests each).
struct Receiver {
    addr: SocketAddr,
    requests: mpsc::Receiver<Received>,
    connections: Arc<AtomicUsize>,
}

impl Receiver {
    fn start(behaviour: Behaviour) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (sent, requests) = mpsc::channel();
        let connections = Arc::new(AtomicUsize::new(0));
        let accepted = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                accepted.fetch_add(1, Ordering::SeqCst);
                let sent = sent.clone();
                std::thread::spawn(move || serve_connection(stream, behaviour, sent));
            }
        });
        Receiver {
            addr,
            requests,
            connections,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn next_request(&self) -> Received {
        self.requests.recv_timeout(ANSWER_WAIT).expect("a request")
    }
}

fn serve_connection(stream: TcpStream, behaviour: Behaviour, sent: mpsc::Sender<Received>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader) {
        let _ = sent.send(request);
        let status = match behaviour {
            Behaviour::Status(status) => status,
            Behaviour::Slow(delay) => {
                std::thread::sleep(delay);
                200
            }
            Behaviour::Silent => {
                // Until the client gives up and closes the connection.
                let _ = reader.read_to_end(&mut Vec::new());
                return;
            }
        };
        let answer = format!("HTTP/1.1 {status} Whatever\r\ncontent-length: 2\r\n\r\nok");
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// One request, or None at the end of the connection.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Received> {
    let mut line = String::new();
    reader.read_line(&mut line).ok().filter(|&n| n > 0)?;
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut headers = HashMap::new();
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let Some((name, value)) = line.trim_end().split_once(':') else {
            break;
        };
        headers.insert(name.to_ascii_lowercase(), value.trim().to_string());
    }
    let length = headers
        .get("content-length")
        .map_or(0, |n| n.parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Received {
        path,
        headers,
        body,
    })
}

fn call(id: u64, url: String) -> Box<WebhookCall> {
    Box::new(WebhookCall {
        id,
        delivery_id: format!("dlv-{id}"),
        attempt: 1,
        url,
        headers: Vec::new(),
        secret: None,
        event: "run.finished",
        body: Arc::from(&br#"{"run":"r1"}"#[..]),
        timeout_ms: 2_000,
    })
}

/// A delivery thread for one shard (`inflight_max` requests at once), and the shard's ends.
fn thread(inflight_max: usize, stop: Arc<AtomicBool>) -> ShardWebhooks {
    let (calls, mut ends) = channels(1);
    let (answer, shard) = ends.pop().unwrap();
    let client = Client::new().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    std::thread::spawn(move || {
        runtime.block_on(serve(calls, vec![answer], client, stop, inflight_max));
        runtime.shutdown_background();
    });
    shard
}

fn running() -> ShardWebhooks {
    thread(REQUESTS_INFLIGHT_MAX, Arc::new(AtomicBool::new(false)))
}

impl ShardWebhooks {
    /// Sends `call` as the shard loop does.
    fn send(&self, call: Box<WebhookCall>) {
        self.out
            .send(call, &Inbox::default(), &ShardMetrics::new(0, false));
    }

    fn answer(&mut self) -> Answer {
        let deadline = Instant::now() + ANSWER_WAIT;
        while Instant::now() < deadline {
            if let Ok(answer) = self.answers.try_recv() {
                return answer;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("no answer within {ANSWER_WAIT:?}");
    }

    /// Sends `call` and waits for its answer.
    fn deliver(&mut self, call: Box<WebhookCall>) -> Result<u16, String> {
        let (id, attempt) = (call.id, call.attempt);
        self.send(call);
        let answer = self.answer();
        assert_eq!((answer.id, answer.attempt), (id, attempt));
        answer.result
    }
}

#[test]
fn a_delivery_posts_the_body_with_flos_headers_the_signature_and_the_users_headers() {
    let receiver = Receiver::start(Behaviour::Status(200));
    let mut webhooks = running();
    let mut sent = call(7, receiver.url("/hooks/flo?x=1"));
    sent.attempt = 3;
    sent.secret = Some("s3cret".into());
    sent.headers = vec![("Authorization".into(), "Bearer abc".into())];
    let body = sent.body.clone();
    assert_eq!(webhooks.deliver(sent), Ok(200));

    let got = receiver.next_request();
    assert_eq!(got.path, "/hooks/flo?x=1");
    assert_eq!(got.body, &body[..]);
    let header = |name: &str| got.headers.get(name).map(String::as_str);
    assert_eq!(header("content-type"), Some("application/json"));
    let user_agent = concat!("flo/", env!("CARGO_PKG_VERSION"));
    assert_eq!(header("user-agent"), Some(user_agent));
    assert_eq!(header("x-flo-delivery"), Some("dlv-7"));
    assert_eq!(header("x-flo-event"), Some("run.finished"));
    assert_eq!(header("x-flo-attempt"), Some("3"));
    assert_eq!(header("authorization"), Some("Bearer abc"));
    assert_eq!(
        header("content-length"),
        Some(body.len().to_string().as_str())
    );
    // The receiver's check: the HMAC of the body it got, with the secret it shares.
    let expected = signature(b"s3cret", &got.body);
    assert_eq!(header("x-flo-signature"), Some(expected.as_str()));
}

#[test]
fn a_delivery_without_a_secret_carries_no_signature() {
    let receiver = Receiver::start(Behaviour::Status(204));
    let mut webhooks = running();
    assert_eq!(webhooks.deliver(call(1, receiver.url("/"))), Ok(204));
    assert!(
        !receiver
            .next_request()
            .headers
            .contains_key("x-flo-signature")
    );
}

#[test]
fn any_status_comes_back_as_it_is_and_redirects_are_not_followed() {
    let mut webhooks = running();
    for status in [500, 302, 404] {
        let receiver = Receiver::start(Behaviour::Status(status));
        assert_eq!(webhooks.deliver(call(1, receiver.url("/"))), Ok(status));
    }
}

#[test]
fn a_refused_connection_comes_back_as_an_error_naming_the_url() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/x");
    let mut webhooks = running();
    let result = webhooks.deliver(call(1, url.clone()));
    assert_eq!(result, Err(format!("connection refused ({url})")));
}

#[test]
fn a_receiver_that_never_answers_times_out() {
    let receiver = Receiver::start(Behaviour::Silent);
    let mut webhooks = running();
    let mut sent = call(1, receiver.url("/"));
    sent.timeout_ms = 200;
    let started = Instant::now();
    let result = webhooks.deliver(sent);
    assert_eq!(result, Err("no answer within 200 ms".into()));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_bad_url_comes_back_as_an_error() {
    let mut webhooks = running();
    let result = webhooks.deliver(call(1, "ftp://example.com/x".into()));
    assert!(
        result
            .unwrap_err()
            .starts_with("invalid URL ftp://example.com/x")
    );
    let mut sent = call(2, "http://127.0.0.1:9/x".into());
    sent.headers = vec![("X-Bad".into(), "line\nbreak".into())];
    let result = webhooks.deliver(sent);
    assert!(result.unwrap_err().contains("X-Bad"));
}

#[test]
fn https_goes_through_tls() {
    // A receiver that speaks no TLS: the handshake fails, and says so.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.read(&mut [0; 1024]);
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let mut webhooks = running();
    let url = format!("https://{addr}/");
    let error = webhooks.deliver(call(1, url.clone())).unwrap_err();
    assert!(error.starts_with("cannot connect: "), "{error}");
    assert!(error.ends_with(&format!("({url})")), "{error}");
}

#[test]
fn two_deliveries_to_one_receiver_share_a_connection() {
    let receiver = Receiver::start(Behaviour::Status(200));
    let mut webhooks = running();
    assert_eq!(webhooks.deliver(call(1, receiver.url("/a"))), Ok(200));
    assert_eq!(webhooks.deliver(call(2, receiver.url("/b"))), Ok(200));
    assert_eq!(receiver.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn a_silent_receiver_does_not_hold_up_deliveries_to_others() {
    let silent = Receiver::start(Behaviour::Silent);
    let good = Receiver::start(Behaviour::Status(200));
    let mut webhooks = running();
    let mut stuck = call(1, silent.url("/"));
    stuck.timeout_ms = 3_000;
    webhooks.send(stuck);
    silent.next_request();
    let started = Instant::now();
    webhooks.send(call(2, good.url("/")));
    let answer = webhooks.answer();
    assert_eq!((answer.id, answer.result), (2, Ok(200)));
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn calls_beyond_the_bound_wait_for_a_permit_and_their_time_starts_when_sent() {
    let slow = Receiver::start(Behaviour::Slow(Duration::from_millis(300)));
    let fast = Receiver::start(Behaviour::Status(200));
    let mut webhooks = thread(1, Arc::new(AtomicBool::new(false)));
    let mut first = call(1, slow.url("/"));
    first.timeout_ms = 2_000;
    // Waits about 300 ms for the permit, and is answered within its 200 ms all the same:
    // they count from its send.
    let mut second = call(2, fast.url("/"));
    second.timeout_ms = 200;
    webhooks.send(first);
    webhooks.send(second);
    let answers = [webhooks.answer(), webhooks.answer()];
    assert_eq!(
        answers.map(|a| (a.id, a.result)),
        [(1, Ok(200)), (2, Ok(200))]
    );
}

#[test]
fn calls_sent_once_a_stop_was_asked_are_answered_the_server_is_stopping() {
    let receiver = Receiver::start(Behaviour::Status(200));
    let mut webhooks = thread(REQUESTS_INFLIGHT_MAX, Arc::new(AtomicBool::new(true)));
    let result = webhooks.deliver(call(1, receiver.url("/")));
    assert_eq!(result, Err(STOPPING.into()));
    assert!(receiver.requests.try_recv().is_err(), "nothing sent");
}

#[test]
fn a_call_the_thread_cannot_take_is_answered_in_the_shards_inbox() {
    let (calls, mut ends) = channels(1);
    drop(calls);
    let (_, shard) = ends.pop().unwrap();
    let inbox = Inbox::default();
    let metrics = ShardMetrics::new(0, true);
    shard
        .out
        .send(call(9, "http://127.0.0.1:9/".into()), &inbox, &metrics);
    let mut taken = std::collections::VecDeque::new();
    inbox.take_all(&mut taken);
    let Some(Input::WebhookAnswered {
        id,
        attempt,
        result,
    }) = taken.pop_front()
    else {
        panic!("a webhook answer");
    };
    assert_eq!((id, attempt, result), (9, 1, Err(STOPPING.into())));
    assert_eq!(metrics.webhook_attempts[2].load(Ordering::Relaxed), 1);
}

#[test]
fn the_thread_ends_once_every_shard_dropped_its_end() {
    let (calls, ends) = channels(2);
    let (answers, shards): (Vec<_>, Vec<_>) = ends.into_iter().unzip();
    let client = Client::new().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = std::thread::spawn(move || {
        runtime.block_on(serve(calls, answers, client, stop, 1));
        runtime.shutdown_background();
    });
    drop(shards);
    let deadline = Instant::now() + ANSWER_WAIT;
    while !thread.is_finished() {
        assert!(Instant::now() < deadline, "the thread still runs");
        std::thread::sleep(Duration::from_millis(5));
    }
}
