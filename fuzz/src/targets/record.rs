//! `record`: a shard's log as recovery reads it back. Segment files are written to a
//! scratch directory (on tmpfs where there is one) and recovered with `flo_ual::recover_from`,
//! each record's payload decoded with `Record::decode` as `Engine::replay` does; the same
//! bytes go through the readers the runtime uses on segments (`segment_marks`,
//! `find_record`). Properties checked besides "no panic": records are applied in LSN order
//! without a gap, every mark points at its record, and recovering a recovered log again
//! finds it clean (nothing more to cut, the same last LSN).
//!
//! Input: one mode byte, then what the mode says.
//! - `MODE_PAYLOAD`: the rest is one record payload, for `Record::decode` alone.
//! - otherwise, with `MODE_SNAPSHOT` the next 8 bytes are the snapshot's LSN (recovery
//!   replays what follows it), then up to `SEGMENTS_MAX` segments separated by
//!   `SEGMENT_SEPARATOR`, each its first LSN (8 bytes, little-endian: the file name) and
//!   its bytes. With `MODE_RESEAL` every record's checksum is recomputed first, so that
//!   edits reach the record decoder instead of stopping at the checksum.

use super::{Signal, Target};
use flo_engine::testing::archived::{ArchivedRun, WfArchived};
use flo_engine::testing::record::{
    ActionDefRecord, GuestKvWrite, LeasedTask, Record, StepNext, StepRan, StepRef, StepWait,
    StreamEntry,
};
use flo_protocol::{
    ActionKind, HistoryEvent, RunInfo, RunStatus, WorkflowRunInfo, WorkflowRunStatus,
    WorkflowStepInfo,
};
use flo_ual::{
    BLOCK_BYTES, Found, LogBuffer, RECORD_HEADER_BYTES, RECORD_PAYLOAD_BYTES_MAX, RecoveredLog,
    align_up, find_record, recover_from, segment_file_name, segment_marks,
};
use std::cell::RefCell;
use std::fs;
use std::path::Path;

pub const TARGET: Target = Target {
    name: "record",
    run,
    seeds,
    dictionary: DICTIONARY,
    len_max: 48 << 10,
};

const MODE_RESEAL: u8 = 1;
const MODE_SNAPSHOT: u8 = 2;
const MODE_PAYLOAD: u8 = 4;
pub const SEGMENT_SEPARATOR: &[u8] = b"\xc1SEGMENT\xc1";
/// Segments of one input beyond this are ignored.
const SEGMENTS_MAX: usize = 4;

fn run(data: &[u8]) -> u64 {
    let Some((&mode, rest)) = data.split_first() else {
        return 0;
    };
    let mut signal = Signal::default();
    if mode & MODE_PAYLOAD != 0 {
        decode(rest, &mut signal);
        return signal.value();
    }
    let (after_lsn, rest) = match mode & MODE_SNAPSHOT {
        0 => (0, rest),
        _ => {
            let (lsn, rest) = rest.split_at(rest.len().min(8));
            (u64_le(lsn), rest)
        }
    };
    let mut segments = split_segments(rest);
    if mode & MODE_RESEAL != 0 {
        for (_, bytes) in &mut segments {
            reseal(bytes);
        }
    }
    for (first_lsn, bytes) in &segments {
        read_segment(*first_lsn, bytes, &mut signal);
    }
    with_scratch(|dir| recover_segments(dir, &segments, after_lsn, &mut signal));
    signal.value()
}

fn u64_le(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
    u64::from_le_bytes(word)
}

fn split_segments(mut rest: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut segments = Vec::new();
    while segments.len() < SEGMENTS_MAX {
        let end = rest
            .windows(SEGMENT_SEPARATOR.len())
            .position(|w| w == SEGMENT_SEPARATOR)
            .unwrap_or(rest.len());
        let (lsn, bytes) = rest[..end].split_at(end.min(8));
        segments.push((u64_le(lsn), bytes.to_vec()));
        if end == rest.len() {
            break;
        }
        rest = &rest[end + SEGMENT_SEPARATOR.len()..];
    }
    segments
}

/// Recomputes the checksum of every record whose header and payload are all there, walking
/// the segment as the log's parser does (`shards/ual/src/format.rs`).
fn reseal(buf: &mut [u8]) {
    let mut pos = 0usize;
    while pos < buf.len() {
        let room = BLOCK_BYTES as usize - pos % BLOCK_BYTES as usize;
        if room < RECORD_HEADER_BYTES {
            pos += room;
            continue;
        }
        let Some(head) = buf.get(pos..pos + RECORD_HEADER_BYTES) else {
            return;
        };
        let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
        if len == 0 {
            pos = align_up(pos as u64 + 1) as usize;
            continue;
        }
        let end = pos + RECORD_HEADER_BYTES + len;
        if len > RECORD_PAYLOAD_BYTES_MAX || end > buf.len() {
            return;
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&buf[pos..pos + 4]);
        h.update(&buf[pos + 8..end]);
        let crc = h.finalize();
        buf[pos + 4..pos + 8].copy_from_slice(&crc.to_le_bytes());
        pos = end;
    }
}

/// The runtime's readers of segment bytes: the marks of a segment recovery did not read,
/// and a record found from a mark (`shards/runtime/src/log_reader.rs`).
fn read_segment(first_lsn: u64, bytes: &[u8], signal: &mut Signal) {
    let marks = segment_marks(bytes);
    signal.add(marks.len() as u64);
    for &(lsn, offset) in &marks {
        let found = find_record(bytes, offset as usize, lsn, true);
        assert!(
            matches!(found, Found::Record { .. }),
            "mark ({lsn}, {offset}) finds {found:?}"
        );
    }
    for lsn in [
        first_lsn,
        first_lsn.wrapping_add(1),
        first_lsn.wrapping_add(5),
    ] {
        for complete in [true, false] {
            match find_record(bytes, 0, lsn, complete) {
                Found::Record { rtype, payload } => {
                    signal.add(rtype as u64);
                    signal.add_len(payload.len());
                }
                Found::More => signal.add(5),
                Found::Missing(reason) => signal.add_message(reason),
            }
        }
    }
}

fn decode(payload: &[u8], signal: &mut Signal) {
    match Record::decode(payload) {
        Ok(record) => signal.add(record.type_code() as u64),
        Err(e) => signal.add_message(&e.to_string()),
    }
}

fn recover_segments(dir: &Path, segments: &[(u64, Vec<u8>)], after_lsn: u64, signal: &mut Signal) {
    for entry in fs::read_dir(dir).expect("the scratch directory lists") {
        let path = entry.expect("a scratch entry").path();
        fs::remove_file(&path).expect("a scratch file is removed");
    }
    for (first_lsn, bytes) in segments {
        fs::write(dir.join(segment_file_name(*first_lsn)), bytes).expect("a segment is written");
    }
    let first = match recover(dir, after_lsn, signal) {
        Ok(log) => log,
        Err(e) => {
            signal.add(6);
            signal.add_message(&e);
            return;
        }
    };
    signal.add(first.truncated.is_some() as u64);
    assert!(
        first.last_lsn >= after_lsn,
        "recovered to {} before the snapshot's {after_lsn}",
        first.last_lsn
    );
    let mut quiet = Signal::default();
    let again = recover(dir, after_lsn, &mut quiet).unwrap_or_else(|e| {
        panic!(
            "the log recovered once (last LSN {}) is refused: {e}",
            first.last_lsn
        )
    });
    assert_eq!(
        (again.last_lsn, again.truncated.as_ref().map(|t| t.2)),
        (first.last_lsn, None),
        "recovering a recovered log"
    );
}

/// `recover_from` with `Engine::replay`'s decoding, checking the LSN order.
fn recover(dir: &Path, after_lsn: u64, signal: &mut Signal) -> Result<RecoveredLog, String> {
    let mut last = None::<u64>;
    recover_from(dir, after_lsn, |lsn, _rtype, payload| {
        match last {
            None => assert!(
                lsn > after_lsn,
                "record {lsn} applied after a snapshot at {after_lsn}"
            ),
            Some(prev) => assert_eq!(Some(lsn), prev.checked_add(1), "records out of order"),
        }
        last = Some(lsn);
        decode(payload, signal);
        Record::decode(payload).map(|_| ())
    })
    .map_err(|e| e.to_string())
}

thread_local! {
    static SCRATCH: RefCell<Option<tempfile::TempDir>> = const { RefCell::new(None) };
}

fn with_scratch(f: impl FnOnce(&Path)) {
    SCRATCH.with(|cell| {
        let mut scratch = cell.borrow_mut();
        let dir = scratch.get_or_insert_with(|| {
            let shm = Path::new("/dev/shm");
            let builder = tempfile::Builder::new().prefix("flo-fuzz-").tempdir_in(shm);
            builder
                .or_else(|_| tempfile::Builder::new().prefix("flo-fuzz-").tempdir())
                .expect("a scratch directory for segments")
        });
        f(dir.path());
    });
}

/// Removes this thread's scratch directory (the driver calls it at the end; a test's
/// thread removes its own when it ends).
pub fn remove_scratch() {
    SCRATCH.with(|cell| cell.borrow_mut().take());
}

const DICTIONARY: &[&[u8]] = &[
    SEGMENT_SEPARATOR,
    // Header words: lengths (none, small, the limit, over it), flags, LSNs.
    b"\x00\x00\x00\x00",
    b"\x10\x00\x00\x00",
    b"\x00\x00\x80\x00",
    b"\x01\x00\x80\x00",
    b"\xff\xff\xff\xff",
    b"\x01\x00",
    b"\x02\x00",
    b"\x03\x00",
    b"\x01\x00\x00\x00\x00\x00\x00\x00",
    b"\xff\xff\xff\xff\xff\xff\xff\xff",
    // MessagePack markers and record names.
    b"\xc0",
    b"\xc2",
    b"\xc3",
    b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff",
    b"\xd9\x20",
    b"\xdb\xff\xff\xff\xff",
    b"\xc4\x10",
    b"\xc6\xff\xff\xff\xff",
    b"\xdd\xff\xff\xff\xff",
    b"\xdf\xff\xff\xff\xff",
    b"\x81",
    b"\x91",
    b"\x92",
    b"\xa6kv_put",
    b"\xabrun_created",
    b"\xb0workflow_defined",
    b"\xacrun_archived",
    b"\xa4yaml",
    b"\xa3def",
    b"\xa4None",
];

fn seeds() -> Vec<Vec<u8>> {
    let records = sample_records();
    let mut seeds: Vec<Vec<u8>> = records
        .iter()
        .map(|r| {
            let mut seed = vec![MODE_PAYLOAD];
            r.encode(&mut seed);
            seed
        })
        .collect();
    // Every record in one segment, a batch of three at a time; with a group; after a
    // snapshot; across two segments.
    let mut log = LogBuffer::new(1);
    let mut segment = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if i % 5 == 1 {
            log.begin_group();
            append(&mut log, r);
            append(&mut log, &records[0]);
            log.end_group();
        } else {
            append(&mut log, r);
        }
        if i % 3 == 2 {
            take_batch(&mut log, &mut segment);
        }
    }
    take_batch(&mut log, &mut segment);
    let last_lsn = log.last_lsn();
    seeds.push(segment_input(MODE_RESEAL, None, &[(1, &segment)]));
    seeds.push(segment_input(0, None, &[(1, &segment)]));
    seeds.push(segment_input(MODE_RESEAL, Some(3), &[(1, &segment)]));
    let mut next = LogBuffer::new(last_lsn + 1);
    let mut second = Vec::new();
    append(&mut next, &records[1]);
    append(&mut next, &records[2]);
    take_batch(&mut next, &mut second);
    seeds.push(segment_input(
        MODE_RESEAL,
        None,
        &[(1, &segment), (last_lsn + 1, &second)],
    ));
    // A torn tail: the last batch cut short.
    let cut = &segment[..segment.len() - 3000];
    seeds.push(segment_input(MODE_RESEAL, None, &[(1, cut)]));
    seeds
}

fn append(log: &mut LogBuffer, record: &Record) {
    log.append(record.type_code(), |out| record.encode(out))
        .expect("a sample record fits");
}

/// The log writer's batch: from a block boundary, padded with zeros to the next one.
fn take_batch(log: &mut LogBuffer, segment: &mut Vec<u8>) {
    if let Some(batch) = log.take(Vec::new()) {
        segment.extend_from_slice(&batch.bytes);
        segment.resize(align_up(segment.len() as u64) as usize, 0);
    }
}

fn segment_input(mode: u8, snapshot: Option<u64>, segments: &[(u64, &[u8])]) -> Vec<u8> {
    let mut input = vec![mode | snapshot.map_or(0, |_| MODE_SNAPSHOT)];
    if let Some(lsn) = snapshot {
        input.extend_from_slice(&lsn.to_le_bytes());
    }
    for (i, (first_lsn, bytes)) in segments.iter().enumerate() {
        if i > 0 {
            input.extend_from_slice(SEGMENT_SEPARATOR);
        }
        input.extend_from_slice(&first_lsn.to_le_bytes());
        input.extend_from_slice(bytes);
    }
    input
}

/// One record of every type, with plausible values.
fn sample_records() -> Vec<Record> {
    let ns = || "payments".to_string();
    let run_info = RunInfo {
        run_id: "charge-1".into(),
        namespace: ns(),
        action: "charge".into(),
        action_version: 2,
        status: RunStatus::Failed,
        input: b"{}".to_vec(),
        output: None,
        outcome: None,
        error: Some("declined".into()),
        attempt: 3,
        priority: 1,
        labels: Some("{\"region\":\"eu\"}".into()),
        idempotency_key: None,
        dead_lettered: true,
        workflow_run_id: None,
        created_at_ms: 1,
        updated_at_ms: 5,
        available_at_ms: 1,
        error_code: None,
    };
    let wf_info = WorkflowRunInfo {
        run_id: "wfrun-1".into(),
        namespace: ns(),
        workflow: "w".into(),
        version: "1".into(),
        status: WorkflowRunStatus::Completed,
        current_step: None,
        waiting_for: None,
        input: b"{\"order\":1}".to_vec(),
        output: Some(b"{\"shipped\":true}".to_vec()),
        steps: vec![WorkflowStepInfo {
            name: "_start".into(),
            outcome: Some("success".into()),
            output: Some(b"{}".to_vec()),
            executions: 1,
            visits: 1,
            first_started_ms: 0,
            last_finished_ms: 0,
            total_ms: 0,
        }],
        terminal: Some("flo.Completed".into()),
        error: None,
        idempotency_key: Some("o-1".into()),
        parent_run_id: None,
        created_at_ms: 1,
        updated_at_ms: 9,
        search_attributes: Some(br#"{"amount":12.5}"#.to_vec()),
        state: None,
        branches: Vec::new(),
        step_since_ms: None,
    };
    let yaml = super::yaml::SAMPLE.to_string();
    let def = flo_workflow::parse_workflow(&yaml)
        .expect("the sample workflow is valid")
        .def;
    vec![
        Record::KvPut {
            namespace: ns(),
            key: "order:1".into(),
            value: b"{\"total\":12}".to_vec(),
            version: 4,
            expires_at_ms: Some(60_000),
        },
        Record::KvDelete {
            namespace: ns(),
            key: "order:1".into(),
        },
        Record::ActionDefined {
            namespace: ns(),
            name: "charge".into(),
            def: ActionDefRecord {
                kind: ActionKind::Wasm,
                version: 2,
                enabled: true,
                timeout_ms: 5000,
                max_retries: 3,
                retry_delay_ms: 100,
                description: Some("charges a card".into()),
                memory_limit_mb: 16,
                wasm: Some(b"\0asm\x01\0\0\0".to_vec()),
                wasm_describe: Some("{}".into()),
                created_at_ms: 1,
                updated_at_ms: 2,
                wasm_entrypoint: Some("run".into()),
            },
        },
        Record::ActionRemoved {
            namespace: ns(),
            name: "charge".into(),
            at_ms: 3,
        },
        Record::ActionEnabled {
            namespace: ns(),
            name: "charge".into(),
            enabled: false,
            at_ms: 4,
        },
        Record::RunCreated {
            namespace: ns(),
            run_id: "charge-1".into(),
            action: "charge".into(),
            action_version: 2,
            input: b"{\"amount\":5}".to_vec(),
            priority: 1,
            labels: Some("{\"region\":\"eu\"}".into()),
            idempotency_key: Some("k-1".into()),
            created_at_ms: 5,
            available_at_ms: 6,
            step: Some(StepRef {
                run_id: "wfrun-1".into(),
                step: "_start".into(),
            }),
        },
        Record::AttemptFailed {
            namespace: ns(),
            run_id: "charge-1".into(),
            attempt: 1,
            action_version: 2,
            error: "trap".into(),
            timed_out: false,
            retry_at_ms: Some(100),
            at_ms: 7,
            dead_letter: true,
            error_code: Some("invalid_card".into()),
        },
        Record::TasksLeased {
            namespace: ns(),
            worker_id: "w-1".into(),
            tasks: vec![LeasedTask {
                run_id: "charge-1".into(),
                attempt: 1,
                expires_at_ms: 60_000,
            }],
            at_ms: 8,
        },
        Record::LeaseExtended {
            namespace: ns(),
            run_id: "charge-1".into(),
            expires_at_ms: 90_000,
        },
        Record::LeasesReleased {
            namespace: ns(),
            run_ids: vec!["charge-1".into(), "charge-2".into()],
            at_ms: 9,
        },
        Record::RunCompleted {
            namespace: ns(),
            run_id: "charge-1".into(),
            attempt: 2,
            action_version: 2,
            output: b"{\"ok\":true}".to_vec(),
            outcome: Some("success".into()),
            kv_writes: vec![
                GuestKvWrite {
                    key: "a".into(),
                    value: Some(b"1".to_vec()),
                    add: None,
                },
                GuestKvWrite {
                    key: "b".into(),
                    value: None,
                    add: Some(1),
                },
            ],
            at_ms: 10,
            state_patch: None,
        },
        Record::RunCancelled {
            namespace: ns(),
            run_id: "charge-3".into(),
            at_ms: 11,
        },
        Record::RunRedriven {
            namespace: ns(),
            run_id: "charge-1".into(),
            attempt: 4,
            at_ms: 11,
            archived: Some(Box::new(run_info.clone())),
        },
        Record::WorkflowDefined {
            namespace: ns(),
            name: def.name.clone(),
            version: def.version.clone(),
            yaml: yaml.clone(),
            at_ms: 12,
            def: Some(Box::new(def)),
        },
        // As written before definitions were stored validated: decoding validates it.
        Record::WorkflowDefined {
            namespace: ns(),
            name: "order-processing".into(),
            version: "1.0.0".into(),
            yaml,
            at_ms: 12,
            def: None,
        },
        Record::WorkflowEnabled {
            namespace: ns(),
            name: "w".into(),
            enabled: false,
            at_ms: 13,
        },
        Record::WfRunStarted {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            workflow: "w".into(),
            version: "1".into(),
            input: b"{\"order\":1}".to_vec(),
            idempotency_key: Some("o-1".into()),
            parent: Some(StepRef {
                run_id: "wfrun-0".into(),
                step: "child".into(),
            }),
            at_ms: 14,
            schedule: None,
            group: None,
            webhook: Some("http://127.0.0.1:9000/hook".into()),
        },
        Record::WfRunStarted {
            namespace: ns(),
            run_id: "sched:w:1764000000000".into(),
            workflow: "w".into(),
            version: "1".into(),
            input: b"{}".to_vec(),
            idempotency_key: None,
            parent: None,
            at_ms: 14,
            schedule: Some(flo_engine::testing::schedules::ScheduledBy {
                tick_ms: 1_764_000_000_000,
                manual: false,
            }),
            group: Some("batch-7".into()),
            webhook: None,
        },
        Record::WebhookAttempted {
            id: 4096,
            attempt: 2,
            at_ms: 15,
            error: Some("HTTP 503".into()),
            retry_at_ms: Some(2015),
        },
        Record::WebhookAttempted {
            id: 4097,
            attempt: 1,
            at_ms: 15,
            error: None,
            retry_at_ms: None,
        },
        Record::WebhookRedelivered {
            id: 4096,
            at_ms: 16,
        },
        Record::ScheduleSkipped {
            namespace: ns(),
            workflow: "w".into(),
            ticks: 3,
            last_tick_ms: 1_764_000_000_000,
            reason: flo_engine::testing::schedules::SkipReason::Busy,
            at_ms: 15,
        },
        Record::SchedulePaused {
            namespace: ns(),
            workflow: "w".into(),
            paused: true,
            at_ms: 15,
        },
        Record::WfRunControl {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            step: None,
            control: flo_engine::testing::record::RunControl::State {
                state: b"{\"count\":2}".to_vec(),
                replace: false,
            },
            at_ms: 15,
        },
        Record::WfStepStarted {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            step: "approve".into(),
            wait: StepWait::Signal {
                signal_type: "approval".into(),
                deadline_ms: Some(3_600_000),
            },
            at_ms: 15,
        },
        Record::WfStepStarted {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            step: "charge".into(),
            wait: StepWait::ActionRun {
                run_id: "charge-1".into(),
                worker: true,
            },
            at_ms: 15,
        },
        Record::WfStepFinished {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            step: "charge".into(),
            outcome: flo_engine::testing::record::StepOutcome::from_name("failure"),
            output: Some(b"{}".to_vec()),
            error: Some("declined".into()),
            consumed_signal: Some(2),
            next: StepNext::Retry { at_ms: 100 },
            at_ms: 16,
            state_patch: Some(b"{\"approved\":true}".to_vec()),
            ran: None,
            output_of_run: true,
        },
        Record::WfStepFinished {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            step: "ship".into(),
            outcome: flo_engine::testing::record::StepOutcome::from_name("success"),
            output: None,
            error: None,
            consumed_signal: None,
            next: StepNext::End {
                terminal: "flo.Completed".into(),
                status: WorkflowRunStatus::Completed,
                reason: None,
            },
            at_ms: 17,
            state_patch: None,
            ran: Some(Box::new(StepRan {
                ran_ms: 3,
                kv_writes: vec![GuestKvWrite {
                    key: "shipped".into(),
                    value: Some(b"1".to_vec()),
                    add: None,
                }],
            })),
            output_of_run: false,
        },
        Record::WfSignalReceived {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            signal_type: "approval".into(),
            payload: b"{\"approved\":true}".to_vec(),
            at_ms: 18,
        },
        Record::WfRunCancelled {
            namespace: ns(),
            run_id: "wfrun-2".into(),
            reason: Some("customer asked".into()),
            at_ms: 19,
        },
        Record::RunArchived {
            namespace: ns(),
            run_id: "charge-1".into(),
            run: ArchivedRun::Action(Box::new(run_info), None),
        },
        Record::RunArchived {
            namespace: ns(),
            run_id: "wfrun-1".into(),
            run: ArchivedRun::Workflow(Box::new(WfArchived::new(
                wf_info,
                vec![HistoryEvent {
                    event_type: flo_protocol::HistoryEventType::from_name("workflow_started"),
                    step: None,
                    detail: String::new(),
                    at_ms: 1,
                    seq: 1,
                }],
            ))),
        },
        Record::RunsForgotten { before_lsn: 20 },
        Record::KvForwarded { up_to_lsn: 21 },
        Record::KvRemoteWrites {
            origin_shard: 1,
            origin_lsn: 33,
            namespace: ns(),
            writes: vec![GuestKvWrite {
                key: "c".into(),
                value: Some(b"3".to_vec()),
                add: None,
            }],
            at_ms: 22,
        },
        Record::StreamCreated {
            namespace: ns(),
            name: "orders".into(),
            partitions: 2,
            retention_ms: Some(60_000),
            max_len: None,
            max_bytes: Some(1 << 20),
            at_ms: 23,
        },
        Record::StreamAppended {
            namespace: ns(),
            stream: "orders".into(),
            partition: 1,
            entries: vec![StreamEntry {
                id: flo_protocol::StreamId::new(23, 1),
                key: Some("c-1".into()),
                headers: [("h".to_string(), "v".to_string())].into(),
                payload: b"{}".to_vec().into_boxed_slice(),
            }],
        },
        Record::StreamTrimmed {
            namespace: ns(),
            stream: "orders".into(),
            partition: 1,
            before: flo_protocol::StreamId::new(24, 0),
        },
        Record::StreamDeleted {
            namespace: ns(),
            name: "orders".into(),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_payload_seed_decodes_and_every_segment_seed_recovers() {
        let records = sample_records();
        let mut payloads = 0;
        let mut logs = 0;
        for seed in seeds() {
            if seed[0] & MODE_PAYLOAD != 0 {
                Record::decode(&seed[1..]).unwrap();
                payloads += 1;
                continue;
            }
            let mut signal = Signal::default();
            let segments = split_segments(&seed[1 + 8 * (seed[0] & MODE_SNAPSHOT != 0) as usize..]);
            with_scratch(|dir| {
                recover_segments(dir, &segments, 0, &mut signal);
                let log = recover(dir, 0, &mut signal).unwrap();
                assert!(log.last_lsn as usize > records.len(), "{}", log.last_lsn);
            });
            logs += 1;
        }
        assert_eq!((payloads, logs), (records.len(), 5));
        remove_scratch();
    }

    #[test]
    fn resealing_makes_an_edited_payload_reach_the_decoder() {
        let mut log = LogBuffer::new(1);
        append(&mut log, &sample_records()[0]);
        let mut segment = Vec::new();
        take_batch(&mut log, &mut segment);
        // Bytes of the key ("order:1") changed: the checksum no longer matches.
        let at = segment.windows(7).position(|w| w == b"order:1").unwrap();
        segment[at] = b'X';
        assert!(segment_marks(&segment).is_empty());
        reseal(&mut segment);
        assert_eq!(segment_marks(&segment), [(1, 0)]);
    }
}
