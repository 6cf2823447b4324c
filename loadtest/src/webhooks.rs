//! The `webhook` workload: a receiver in this process (HTTP/1.1, keep-alive, a thread per
//! connection, answering 200), a one-step workflow (`loadtest-webhook`) whose `webhook:`
//! posts each run's completion to it, `--ops` starts through the usual connections
//! (answered once durable), until every delivery arrived. Reports deliveries/s (first start
//! to last delivery) and each delivery's latency from its event (the run's completion, by
//! the shard's clock) to its arrival. Then reads the whole run event feed a page of 1,000
//! at a time: events/s.

use crate::args::Args;
use crate::driver;
use crate::workload::{Generator, register_wasm_action, start_op};
use flo_protocol::{Op, Reply};
use hdrhistogram::Histogram;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const WORKFLOW: &str = "loadtest-webhook";

/// What the receiver saw: deliveries by id (a repeat is counted once), event-to-arrival
/// latencies (µs), the first and last arrival.
#[derive(Default)]
struct Seen {
    ids: HashMap<String, u32>,
    latency: Vec<u64>,
    first: Option<Instant>,
    last: Option<Instant>,
}

/// The local receiver; its URL.
pub struct Receiver {
    port: u16,
    seen: Arc<Mutex<Seen>>,
}

impl Receiver {
    pub fn start() -> Result<Receiver, String> {
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot listen: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let shared = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let seen = shared.clone();
                std::thread::spawn(move || serve(conn, &seen));
            }
        });
        Ok(Receiver { port, seen })
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    fn delivered(&self) -> usize {
        self.seen.lock().map_or(0, |s| s.ids.len())
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One connection: requests in turn, each answered 200.
fn serve(conn: TcpStream, seen: &Mutex<Seen>) {
    let _ = conn.set_nodelay(true);
    let Ok(read_half) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut writer = conn;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut len = 0usize;
        let mut id = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let h = line.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "content-length" => len = v.trim().parse().unwrap_or(0),
                    "x-flo-delivery" => id = v.trim().to_string(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let at_ms = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|b| b["at_ms"].as_u64());
        if let Ok(mut s) = seen.lock() {
            let arrived = Instant::now();
            s.first.get_or_insert(arrived);
            s.last = Some(arrived);
            let n = s.ids.entry(id).or_insert(0);
            *n += 1;
            if *n == 1
                && let Some(at) = at_ms
            {
                s.latency.push(now_ms().saturating_sub(at) * 1000);
            }
        }
        if writer
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .is_err()
        {
            return;
        }
    }
}

/// Registers the action and creates the workflow posting to `url`.
pub fn prepare(addr: &str, token: Option<&str>, namespace: &str, url: &str) -> Result<(), String> {
    register_wasm_action(addr, token, namespace)?;
    let mut c = flo::Client::connect_as(addr, token)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(namespace);
    let yaml = format!(
        "kind: Workflow\nname: {WORKFLOW}\nversion: \"1\"\nwebhook:\n  url: {url}\n  events: [completed]\n  secret: loadtest\nstart:\n  run: \"@actions/loadtest-ok\"\n  transitions:\n    success: flo.Completed\n    failure: flo.Failed\n"
    );
    c.create_workflow(&yaml)
        .map_err(|e| format!("cannot create {WORKFLOW}: {e}"))?;
    Ok(())
}

/// Starts of `loadtest-webhook`, answered once the start is durable.
pub struct WebhookStart {
    namespace: String,
}

impl WebhookStart {
    pub fn new(namespace: &str) -> Self {
        WebhookStart {
            namespace: namespace.to_string(),
        }
    }
}

impl Generator for WebhookStart {
    fn fill(&mut self, _n: u64, _intended: Option<Instant>, op: &mut Op) {
        *op = start_op(&self.namespace, WORKFLOW, b"{}".to_vec());
    }

    fn check(&self, _n: u64, reply: &Reply) -> Result<(), String> {
        match reply {
            Reply::WorkflowStarted { .. } => Ok(()),
            other => Err(format!("unexpected reply to a workflow start: {other:?}")),
        }
    }
}

/// After the starts (`started`: their outcome, from `began`): waits for every delivery,
/// reads the event feed; prints the report. True when every delivery arrived.
pub fn finish(
    args: &Args,
    addr: &str,
    token: Option<&str>,
    receiver: &Receiver,
    started: &driver::Outcome,
    began: Instant,
) -> Result<bool, String> {
    let want = (started.ops - started.errors) as usize;
    let deadline = Instant::now() + Duration::from_secs_f64(args.max_secs.max(60.0));
    while receiver.delivered() < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (delivered, repeats, first, last, mut latency) = {
        let s = receiver.seen.lock().map_err(|_| "receiver poisoned")?;
        let repeats: u32 = s.ids.values().map(|n| n - 1).sum();
        (s.ids.len(), repeats, s.first, s.last, s.latency.clone())
    };
    let secs = last
        .map_or(began.elapsed(), |l| l.duration_since(began))
        .as_secs_f64()
        .max(1e-9);
    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    latency.sort_unstable();
    for us in &latency {
        let _ = hist.record((*us).max(1));
    }
    let q = |p: f64| hist.value_at_quantile(p) as f64 / 1000.0;
    let spread = match (first, last) {
        (Some(f), Some(l)) => l.duration_since(f).as_secs_f64(),
        _ => 0.0,
    };

    // The event feed, read whole.
    let mut c = flo::Client::connect_as(addr, token)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(args.namespace.clone());
    let read_start = Instant::now();
    let (mut events, mut pages, mut cursor) = (0u64, 0u64, None::<String>);
    loop {
        let page = c
            .workflow_events(None, cursor.as_deref(), Some(1000))
            .map_err(|e| format!("cannot read the event feed: {e}"))?;
        pages += 1;
        if page.events.is_empty() {
            break;
        }
        events += page.events.len() as u64;
        cursor = Some(page.cursor);
    }
    let read_secs = read_start.elapsed().as_secs_f64().max(1e-9);

    println!("workload     webhook");
    println!(
        "runs started {} ({} errors)",
        started.ops - started.errors,
        started.errors
    );
    println!(
        "delivered    {delivered} of {want} ({repeats} sent again), {:.0} deliveries/s from the first start to the last delivery ({spread:.3} s between the first and last arrival)",
        delivered as f64 / secs
    );
    println!(
        "latency ms   event to arrival (ms clock): p50 {:.0}  p90 {:.0}  p99 {:.0}  max {:.0}",
        q(0.5),
        q(0.9),
        q(0.99),
        hist.max() as f64 / 1000.0
    );
    println!(
        "event feed   {events} events read in {pages} pages of up to 1,000: {:.0} events/s ({read_secs:.3} s)",
        events as f64 / read_secs
    );
    Ok(delivered >= want)
}
