//! `frame`: the bytes a client sends on a connection, taken as the server's listener takes
//! them (`shards/runtime/src/listener.rs`: `read_loop` → `split_frame`, `handle_frame` →
//! `decode_payload::<Request>`, on failure `decode_payload::<RequestId>` for the id to answer,
//! and with an auth file the connection's `Gate::check`, whose first request is the `Hello`
//! handshake), plus the client's side of the same frames (`decode_payload::<Response>`, as
//! the SDK reads replies).
//!
//! Input: one mode byte, then the stream.
//! - `MODE_FRAMED` clear: the stream as it comes off the socket (length prefixes and all).
//! - `MODE_FRAMED` set: payloads separated by `SEPARATOR`; the target writes each one's
//!   length prefix, so that edits which change a payload's length still reach the decoder.
//! - `MODE_GATE`: a server with an auth file (`AUTH_FILE`): every request passes the gate.

use super::{Signal, Target};
use flo_engine::auth::{AuthTable, FileFormat, Gate, Session};
use flo_protocol::{
    ActionInfo, ActionKind, ActionSpec, ErrorValue, FRAME_BYTES_MAX, FRAME_HEADER_BYTES,
    HistoryEvent, InvokeSpec, KvEntry, ModuleCacheInfo, Op, PROTOCOL_VERSION, Reply, Request,
    RequestId, Response, RunInfo, RunStatus, ShardInfo, ShardMap, StatusInfo, StreamConfig,
    StreamId, StreamInfo, StreamReadSpec, StreamRecord, StreamRecordIn, TaskAssignment, Token,
    WorkerSpec, WorkerType, WorkflowRunInfo, WorkflowRunStatus, WorkflowStartSpec,
    WorkflowStepInfo, decode_payload, encode_frame, split_frame,
};
use std::borrow::Cow;

pub const TARGET: Target = Target {
    name: "frame",
    run,
    seeds,
    dictionary: DICTIONARY,
    len_max: 8 << 10,
};

const MODE_FRAMED: u8 = 1;
const MODE_GATE: u8 = 2;
/// Between payloads in `MODE_FRAMED`: 0xc1 is the one byte MessagePack never uses, and
/// UTF-8 text never holds it.
pub const SEPARATOR: &[u8] = &[0xc1, 0xc1, 0xc1, 0xc1];

/// The gated server's tokens: one of each role, the client's limited to one namespace.
const AUTH_FILE: &str = "tokens:
  - {token: adm, role: admin, namespaces: ['*'], name: ops}
  - {token: cli, role: client, namespaces: [payments], name: app}
  - {token: wrk, role: worker, namespaces: [payments, default]}
";
/// The gate's clock: any fixed time (it only paces log lines).
const NOW_MS: u64 = 1_000_000;

fn run(data: &[u8]) -> u64 {
    let Some((&mode, rest)) = data.split_first() else {
        return 0;
    };
    let stream = match mode & MODE_FRAMED {
        0 => Cow::Borrowed(rest),
        _ => Cow::Owned(with_length_prefixes(rest)),
    };
    match mode & MODE_GATE {
        0 => read_stream(&stream, None),
        _ => GATE.with(|gate| read_stream(&stream, Some(gate))),
    }
}

thread_local! {
    /// A shard's gate (one per thread, as a gate is one shard's).
    static GATE: Gate = {
        let table = AuthTable::parse(AUTH_FILE, FileFormat::Yaml).expect("the fuzz auth file");
        Gate::new(std::sync::Arc::new(table))
    };
}

/// The payloads between separators, each behind its length prefix.
fn with_length_prefixes(rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rest.len() + 16);
    let mut pieces = Vec::new();
    let mut start = 0;
    while let Some(i) = find(&rest[start..], SEPARATOR) {
        pieces.push(&rest[start..start + i]);
        start += i + SEPARATOR.len();
    }
    pieces.push(&rest[start..]);
    for piece in pieces {
        out.extend_from_slice(&(piece.len() as u32).to_be_bytes());
        out.extend_from_slice(piece);
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// What `read_loop` does with the bytes of a connection: frame after frame until one is
/// incomplete or its header is refused (which closes the connection).
fn read_stream(stream: &[u8], gate: Option<&Gate>) -> u64 {
    let mut signal = Signal::default();
    let mut session = Session::default();
    let mut start = 0;
    loop {
        match split_frame(&stream[start..], FRAME_BYTES_MAX) {
            Ok(Some((payload, used))) => {
                assert!(used == FRAME_HEADER_BYTES + payload.len(), "frame length");
                handle_frame(payload, gate, &mut session, &mut signal);
                start += used;
            }
            Ok(None) => {
                signal.add(1);
                return signal.value();
            }
            Err(e) => {
                signal.add(2);
                signal.add_message(&e.to_string());
                return signal.value();
            }
        }
    }
}

/// `handle_frame`: the request, or the id to answer a malformed one with; the gate; the
/// error reply the listener would write.
fn handle_frame(payload: &[u8], gate: Option<&Gate>, session: &mut Session, signal: &mut Signal) {
    signal.add(decode_payload::<Response>(payload).is_ok() as u64);
    let (request, error) = match decode_payload::<Request>(payload) {
        Ok(Request { id, op }) => {
            signal.add(op_code(&op));
            let verdict = gate.map(|g| g.check(session, &op, NOW_MS));
            match verdict {
                Some(Err(refusal)) => {
                    signal.add(3);
                    signal.add(refusal.log_line.is_some() as u64);
                    (id, refusal.error)
                }
                _ => return,
            }
        }
        Err(e) => {
            let id = decode_payload::<RequestId>(payload).map_or(0, |r| r.id);
            signal.add(4);
            signal.add_message(&e.to_string());
            (id, ErrorValue::bad_request(format!("{e}")))
        }
    };
    let response = Response {
        id: request,
        result: Err(error),
    };
    let mut out = Vec::new();
    encode_frame(&response, &mut out).expect("an error reply encodes");
}

/// Which operation (the discriminant's hash, stable within a build).
fn op_code(op: &Op) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::mem::discriminant(op).hash(&mut h);
    h.finish()
}

const DICTIONARY: &[&[u8]] = &[
    // MessagePack markers: nil, booleans, numbers, strings, binaries, arrays, maps, ext.
    b"\xc0",
    b"\xc2",
    b"\xc3",
    b"\xcc\xff",
    b"\xcd\xff\xff",
    b"\xce\xff\xff\xff\xff",
    b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff",
    b"\xd0\x80",
    b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00",
    b"\xca\x7f\xc0\x00\x00",
    b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00",
    b"\xd9\x20",
    b"\xda\xff\xff",
    b"\xdb\xff\xff\xff\xff",
    b"\xc4\x10",
    b"\xc5\xff\xff",
    b"\xc6\xff\xff\xff\xff",
    b"\xdc\xff\xff",
    b"\xdd\xff\xff\xff\xff",
    b"\xde\xff\xff",
    b"\xdf\xff\xff\xff\xff",
    b"\x80",
    b"\x81",
    b"\x82",
    b"\x90",
    b"\x91",
    b"\x92",
    b"\xa0",
    b"\xd4\x01\x00",
    b"\xc7\x01\x01\x00",
    b"\xff",
    b"\x7f",
    // Field and variant names.
    b"\xa2id",
    b"\xa2op",
    b"\xa5hello",
    b"\xa5token",
    b"\xa6kv_put",
    b"\xa6kv_get",
    b"\xa9namespace",
    b"\xa3key",
    b"\xa5value",
    b"\xa7wait_ms",
    b"\xa6result",
    b"\xa2Ok",
    b"\xa3Err",
    b"\xa4code",
    b"\xa7message",
    b"\xa8payments",
    b"\xa3adm",
    b"\xa3cli",
    b"\xa3wrk",
    SEPARATOR,
    // Length prefixes: empty, small, the limit, over it.
    b"\x00\x00\x00\x00",
    b"\x00\x00\x00\x10",
    b"\x00\x40\x00\x00",
    b"\x00\x40\x00\x01",
    b"\xff\xff\xff\xff",
];

fn seeds() -> Vec<Vec<u8>> {
    let hello = |token: Option<&str>| Request {
        id: 1,
        op: Op::Hello {
            protocol_version: PROTOCOL_VERSION,
            client: "flo-fuzz".into(),
            token: token.map(Token::new),
        },
    };
    let payload = |request: &Request| {
        let mut out = Vec::new();
        encode_frame(request, &mut out).expect("a sample request encodes");
        out.split_off(FRAME_HEADER_BYTES)
    };
    let mut seeds = Vec::new();
    for (i, op) in sample_ops().into_iter().enumerate() {
        let request = Request {
            id: 2 + i as u64,
            op,
        };
        // As sent: the handshake, then the request.
        let mut raw = vec![0];
        encode_frame(&hello(None), &mut raw).expect("hello encodes");
        encode_frame(&request, &mut raw).expect("a sample request encodes");
        seeds.push(raw);
        // Framed by the target, on a server without and with an auth file.
        let token = ["adm", "cli", "wrk"][i % 3];
        for (mode, hello) in [
            (MODE_FRAMED, hello(None)),
            (MODE_FRAMED | MODE_GATE, hello(Some(token))),
        ] {
            let mut framed = vec![mode];
            framed.extend_from_slice(&payload(&hello));
            framed.extend_from_slice(SEPARATOR);
            framed.extend_from_slice(&payload(&request));
            seeds.push(framed);
        }
    }
    for (i, reply) in sample_replies().into_iter().enumerate() {
        let response = Response {
            id: i as u64,
            result: reply,
        };
        let mut framed = vec![MODE_FRAMED];
        let mut out = Vec::new();
        encode_frame(&response, &mut out).expect("a sample reply encodes");
        framed.extend_from_slice(&out[FRAME_HEADER_BYTES..]);
        seeds.push(framed);
    }
    seeds
}

/// One request of every operation, with plausible values.
fn sample_ops() -> Vec<Op> {
    let ns = || "payments".to_string();
    vec![
        Op::Hello {
            protocol_version: PROTOCOL_VERSION,
            client: "cli".into(),
            token: Some(Token::new("adm")),
        },
        Op::Status,
        Op::ShardMap,
        Op::KvGet {
            namespace: ns(),
            key: "order:1".into(),
            wait_ms: Some(1000),
            after_version: Some(2),
            newer_than_current: false,
        },
        Op::KvPut {
            namespace: ns(),
            key: "order:1".into(),
            value: b"{\"total\":12}".to_vec(),
            ttl_ms: Some(60_000),
            if_version: Some(0),
            if_exists: false,
        },
        Op::KvDelete {
            namespace: ns(),
            key: "order:1".into(),
            if_version: Some(3),
        },
        Op::KvList {
            namespace: ns(),
            prefix: "order:".into(),
            limit: Some(10),
            cursor: Some("order:0".into()),
        },
        Op::ActionRegister(ActionSpec {
            namespace: ns(),
            name: "charge".into(),
            kind: ActionKind::Wasm,
            wasm: Some(b"(module)".to_vec()),
            timeout_ms: Some(5000),
            max_retries: Some(3),
            retry_delay_ms: Some(100),
            description: Some("charges a card".into()),
            memory_limit_mb: Some(16),
            wasm_entrypoint: None,
        }),
        Op::ActionGet {
            namespace: ns(),
            name: "charge".into(),
        },
        Op::ActionList { namespace: ns() },
        Op::ActionDelete {
            namespace: ns(),
            name: "charge".into(),
        },
        Op::ActionSetEnabled {
            namespace: ns(),
            name: "charge".into(),
            enabled: false,
        },
        Op::ActionInvoke(InvokeSpec {
            namespace: ns(),
            action: "charge".into(),
            input: b"{\"amount\":5}".to_vec(),
            priority: Some(3),
            delay_ms: Some(10),
            idempotency_key: Some("k-1".into()),
            labels: Some("{\"region\":\"eu\"}".into()),
            wait_ms: Some(100),
        }),
        Op::RunStatus {
            namespace: ns(),
            run_id: "charge-1".into(),
        },
        Op::RunWait {
            namespace: ns(),
            run_id: "charge-1".into(),
            timeout_ms: 1000,
        },
        Op::RunList {
            namespace: ns(),
            action: "charge".into(),
            status: Some(RunStatus::Failed),
            dead_letter: true,
            limit: Some(5),
            cursor: Some("0:12".into()),
            query: Some(r#"labels.region = "eu""#.into()),
        },
        Op::RunCancel {
            namespace: ns(),
            run_id: "charge-1".into(),
        },
        Op::WorkerRegister(WorkerSpec {
            namespace: ns(),
            worker_id: "w-1".into(),
            worker_type: WorkerType::Action,
            max_concurrency: Some(4),
            processes: vec!["charge".into()],
            metadata: Some("{}".into()),
            machine_id: Some("m".into()),
            labels: Some("{\"region\":\"eu\"}".into()),
        }),
        Op::WorkerHeartbeat {
            namespace: ns(),
            worker_id: "w-1".into(),
            current_load: 2,
        },
        Op::WorkerDrain {
            namespace: ns(),
            worker_id: "w-1".into(),
        },
        Op::WorkerDeregister {
            namespace: ns(),
            worker_id: "w-1".into(),
        },
        Op::WorkerGet {
            namespace: ns(),
            worker_id: "w-1".into(),
        },
        Op::WorkerList { namespace: ns() },
        Op::TaskAwait {
            namespace: ns(),
            worker_id: "w-1".into(),
            actions: vec!["charge".into(), "refund".into()],
            max_tasks: 16,
            block_ms: 30_000,
            home_only: true,
        },
        Op::TaskComplete {
            namespace: ns(),
            worker_id: "w-1".into(),
            task_id: "charge-1".into(),
            action: "charge".into(),
            attempt: Some(1),
            result: b"{\"ok\":true}".to_vec(),
            outcome: Some("success".into()),
            state: Some(b"{\"approved\":true}".to_vec()),
        },
        Op::TaskFail {
            namespace: ns(),
            worker_id: "w-1".into(),
            task_id: "charge-1".into(),
            action: "charge".into(),
            attempt: Some(2),
            error: "card declined".into(),
            retry: true,
            non_retryable: false,
            error_code: Some("card_declined".into()),
        },
        Op::TaskTouch {
            namespace: ns(),
            worker_id: "w-1".into(),
            task_id: "charge-1".into(),
            action: "charge".into(),
            extend_ms: 60_000,
        },
        Op::WorkflowCreate {
            namespace: ns(),
            yaml: "kind: Workflow\nname: w\nversion: \"1\"\nstart:\n  run: \"@actions/a\"\n  transitions:\n    success: flo.Completed\n".into(),
        },
        Op::WorkflowGet {
            namespace: ns(),
            name: "w".into(),
            version: Some("1".into()),
        },
        Op::WorkflowList { namespace: ns() },
        Op::WorkflowSetEnabled {
            namespace: ns(),
            name: "w".into(),
            enabled: true,
        },
        Op::WorkflowStart(WorkflowStartSpec {
            namespace: ns(),
            name: "w".into(),
            version: None,
            input: b"{\"order\":1}".to_vec(),
            idempotency_key: Some("o-1".into()),
            wait_ms: Some(1000),
            run_id: Some("order-1".into()),
            group: Some("batch-7".into()),
            webhook: Some("https://hooks.example.com/flo".into()),
        }),
        Op::WorkflowStatus {
            namespace: ns(),
            run_id: "wfrun-1".into(),
        },
        Op::WorkflowWait {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            timeout_ms: 1000,
        },
        Op::WorkflowHistory {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            limit: Some(10),
            after: Some(3),
        },
        Op::WorkflowSignal {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            signal_type: "approval".into(),
            payload: b"{\"approved\":true}".to_vec(),
        },
        Op::WorkflowCancel {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            reason: Some("customer asked".into()),
        },
        Op::WorkflowControl {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            control: flo_protocol::WorkflowControl::Continue { reset_visits: true },
        },
        Op::WorkflowEvents {
            namespace: ns(),
            workflow: Some("order".into()),
            cursor: Some("ev.8.0".into()),
            limit: Some(10),
        },
        Op::WorkflowUpdateState {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            state: b"{\"approved\":true}".to_vec(),
            replace: false,
            continue_run: true,
        },
        Op::WebhookDeliveries {
            namespace: ns(),
            failed: true,
            workflow: Some("order".into()),
            limit: Some(10),
        },
        Op::WebhookRedeliver {
            namespace: ns(),
            id: "1-4096".into(),
        },
        Op::WorkflowListRuns {
            namespace: ns(),
            name: "w".into(),
            status: Some(WorkflowRunStatus::Waiting),
            limit: Some(20),
            cursor: None,
            timed_out: None,
        },
        Op::StreamCreate {
            namespace: ns(),
            name: "orders".into(),
            config: StreamConfig {
                partitions: Some(4),
                retention_ms: Some(60_000),
                max_len: Some(1000),
                max_bytes: None,
            },
        },
        Op::StreamDelete {
            namespace: ns(),
            name: "orders".into(),
        },
        Op::StreamAppend {
            namespace: ns(),
            stream: "orders".into(),
            records: vec![StreamRecordIn {
                key: Some("c-1".into()),
                headers: [("h".to_string(), "v".to_string())].into(),
                payload: b"{}".to_vec(),
            }],
            partition: None,
        },
        Op::StreamRead(StreamReadSpec {
            namespace: ns(),
            stream: "orders".into(),
            after: Some(StreamId::new(1, 2)),
            count: Some(10),
            partition: Some(1),
            tail: false,
            block_ms: Some(100),
        }),
        Op::StreamGet {
            namespace: ns(),
            name: "orders".into(),
        },
        Op::StreamList { namespace: ns() },
        Op::StreamTrim {
            namespace: ns(),
            stream: "orders".into(),
            before: StreamId::new(5, 0),
            dry_run: true,
        },
        Op::TestAdvanceClock { ms: 1000 },
    ]
}

/// A sample of replies, for the client's decoder.
fn sample_replies() -> Vec<Result<Reply, ErrorValue>> {
    let run = RunInfo {
        run_id: "charge-1".into(),
        namespace: "payments".into(),
        action: "charge".into(),
        action_version: 2,
        status: RunStatus::Completed,
        input: b"{}".to_vec(),
        output: Some(b"{\"ok\":true}".to_vec()),
        outcome: Some("success".into()),
        error: None,
        attempt: 1,
        priority: 0,
        labels: None,
        idempotency_key: Some("k".into()),
        dead_lettered: false,
        workflow_run_id: None,
        created_at_ms: 1,
        updated_at_ms: 2,
        available_at_ms: 1,
        error_code: Some("timeout".into()),
    };
    let wf_run = WorkflowRunInfo {
        run_id: "wfrun-1".into(),
        namespace: "payments".into(),
        workflow: "w".into(),
        version: "1".into(),
        status: WorkflowRunStatus::Waiting,
        current_step: Some("approve".into()),
        waiting_for: Some("signal approval".into()),
        input: b"{}".to_vec(),
        output: None,
        steps: vec![WorkflowStepInfo {
            name: "_start".into(),
            outcome: Some("success".into()),
            output: Some(b"1".to_vec()),
            executions: 1,
            visits: 1,
            first_started_ms: 0,
            last_finished_ms: 0,
            total_ms: 0,
        }],
        terminal: None,
        error: None,
        idempotency_key: None,
        parent_run_id: Some("wfrun-0".into()),
        created_at_ms: 1,
        updated_at_ms: 2,
        search_attributes: Some(br#"{"customer":"c-1"}"#.to_vec()),
        state: Some(br#"{"total":3}"#.to_vec()),
        branches: vec![flo_protocol::WorkflowBranchInfo {
            step: "b".into(),
            status: WorkflowRunStatus::Waiting,
            waiting_for: Some("signal go".into()),
            since_ms: 5,
        }],
        step_since_ms: None,
    };
    let stream_info = StreamInfo {
        namespace: "default".into(),
        name: "orders".into(),
        partitions: 4,
        retention_ms: None,
        max_len: Some(100),
        max_bytes: None,
        created_at_ms: 1,
        length: 2,
        bytes: 10,
        first_id: Some(StreamId::new(1, 0)),
        last_id: Some(StreamId::new(2, 3)),
        appended: 5,
    };
    let shard = ShardInfo {
        shard: 0,
        lsn: 10,
        durable_lsn: 9,
        segments: 1,
        kv_keys: 3,
        runs: 2,
        workflow_runs: 1,
        archived_runs: 5,
        run_index_bytes: 120,
        snapshot_lsn: 0,
        snapshot_age_ms: None,
        snapshot_pause_ms: 0,
        snapshot_write_ms: 0,
        disk_bytes: 4096,
        disk_full: false,
        executions: 1,
        run_waits: 0,
        module_cache: Some(ModuleCacheInfo {
            bytes: 4096,
            modules: 1,
            budget_bytes: 1 << 29,
            generation: 2,
        }),
        stream_records: 2,
        stream_bytes: 10,
    };
    vec![
        Ok(Reply::Hello {
            protocol_version: PROTOCOL_VERSION,
            server_version: "0.1.0".into(),
            shard_count: 2,
            partitions: 256,
            shard: Some(1),
        }),
        Ok(Reply::Status(StatusInfo {
            server_version: "0.1.0".into(),
            durability: "sync".into(),
            partitions: 256,
            shards: vec![shard],
            module_cache: None,
            counts_hidden: false,
        })),
        Ok(Reply::ShardMap(ShardMap {
            hash: "xxh3-64".into(),
            partitions: 4,
            shard_count: 2,
            owners: vec![0, 1, 0, 1],
        })),
        Ok(Reply::KvValue(Some(KvEntry {
            key: "k".into(),
            value: b"v".to_vec(),
            version: 3,
            expires_at_ms: Some(9),
        }))),
        Ok(Reply::Action(ActionInfo {
            namespace: "payments".into(),
            name: "charge".into(),
            kind: ActionKind::User,
            version: 1,
            enabled: true,
            timeout_ms: 1000,
            max_retries: 3,
            retry_delay_ms: 10,
            description: None,
            memory_limit_mb: 16,
            wasm_bytes: None,
            wasm_describe: None,
            wasm_entrypoint: None,
            created_at_ms: 1,
            updated_at_ms: 1,
        })),
        Ok(Reply::Run(run.clone())),
        Ok(Reply::Runs {
            runs: vec![run],
            truncated: true,
            next_cursor: Some("c1".into()),
        }),
        Ok(Reply::Tasks(vec![TaskAssignment {
            task_id: "charge-1".into(),
            action: "charge".into(),
            namespace: "payments".into(),
            payload: b"{}".to_vec(),
            attempt: 1,
            priority: 0,
            created_at_ms: 1,
            lease_expires_at_ms: 2,
            state: None,
        }])),
        Ok(Reply::WorkflowRun(wf_run)),
        Ok(Reply::WorkflowHistoryPage {
            events: vec![HistoryEvent {
                event_type: flo_protocol::HistoryEventType::from_name("step_started"),
                step: Some("_start".into()),
                detail: "run charge-1".into(),
                at_ms: 1,
                seq: 1,
            }],
            next_after: Some(1),
        }),
        Ok(Reply::StreamCreated {
            name: "orders".into(),
            partitions: 4,
            created: true,
        }),
        Ok(Reply::StreamDeleted { deleted: true }),
        Ok(Reply::StreamAppended {
            ids: vec![StreamId::new(1, 0), StreamId::new(1, 4)],
        }),
        Ok(Reply::StreamRecords {
            records: vec![StreamRecord {
                id: StreamId::new(1, 0),
                partition: 0,
                key: None,
                headers: Default::default(),
                payload: b"x".to_vec(),
            }],
            next_after: Some(StreamId::new(1, 0)),
        }),
        Ok(Reply::Streams(vec![stream_info.clone()])),
        Ok(Reply::Stream(stream_info)),
        Ok(Reply::StreamTrimmed { removed: 3 }),
        Ok(Reply::Done),
        Err(ErrorValue::not_found("no such key")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_a_seed() {
        // `Op` has no list of its variants: count the distinct ones sampled.
        let codes: std::collections::HashSet<u64> = sample_ops().iter().map(op_code).collect();
        assert_eq!(codes.len(), sample_ops().len());
        assert_eq!(codes.len(), 51, "a new Op? add it to sample_ops");
    }

    #[test]
    fn the_framed_seeds_decode_to_requests_or_responses() {
        for seed in seeds().into_iter().filter(|s| s[0] & MODE_FRAMED != 0) {
            let stream = with_length_prefixes(&seed[1..]);
            let mut rest = &stream[..];
            while let Some((payload, used)) = split_frame(rest, FRAME_BYTES_MAX).unwrap() {
                let request = decode_payload::<Request>(payload).is_ok();
                let response = decode_payload::<Response>(payload).is_ok();
                assert!(request || response, "{seed:?}");
                rest = &rest[used..];
            }
            assert!(rest.is_empty());
        }
    }

    #[test]
    fn the_gated_seeds_pass_the_gate() {
        for seed in seeds().into_iter().filter(|s| s[0] & MODE_GATE != 0) {
            let stream = with_length_prefixes(&seed[1..]);
            let mut session = Session::default();
            let mut rest = &stream[..];
            let mut admitted = 0;
            while let Some((payload, used)) = split_frame(rest, FRAME_BYTES_MAX).unwrap() {
                let request = decode_payload::<Request>(payload).unwrap();
                GATE.with(|g| {
                    admitted += g.check(&mut session, &request.op, NOW_MS).is_ok() as u32
                });
                rest = &rest[used..];
            }
            // The handshake at least; the request when its role allows it.
            assert!(admitted >= 1);
        }
    }
}
