//! Every record a client, a guest or a worker can make bigger is bounded below the
//! log's record limit by checks made before it is built (`Core::commit` stops the
//! server on an oversize record: a bug, never input).

use crate::actions::RUN_RESULT_BYTES_MAX;
use crate::fold::record::{GuestKvWrite, Record, StepNext};
use crate::workers::TASK_ERROR_BYTES_MAX;
use crate::workflows::STEP_OUTPUT_BYTES_MAX;
use flo_protocol::{
    FRAME_BYTES_MAX, IDEMPOTENCY_KEY_BYTES_MAX, NAMESPACE_BYTES_MAX, RUN_ID_BYTES_MAX,
    RUN_INPUT_BYTES_MAX,
};
use flo_ual::RECORD_PAYLOAD_BYTES_MAX;

fn text(n: usize) -> String {
    "x".repeat(n)
}

fn size(record: &Record) -> usize {
    let mut out = Vec::new();
    record.encode(&mut out);
    out.len()
}

#[test]
fn the_largest_records_input_can_make_fit_in_one_log_record() {
    // A guest's result: output and 10,000 KV writes (the wasm crate's MAX_KV_WRITES)
    // within RUN_RESULT_BYTES_MAX together.
    let writes: Vec<GuestKvWrite> = (0..10_000)
        .map(|i| GuestKvWrite {
            key: format!("{i:04}"),
            value: Some(vec![1]),
            add: None,
        })
        .collect();
    let completed = Record::RunCompleted {
        namespace: text(NAMESPACE_BYTES_MAX),
        run_id: text(RUN_ID_BYTES_MAX),
        attempt: u32::MAX,
        action_version: u32::MAX,
        output: vec![7; RUN_RESULT_BYTES_MAX - 50_000],
        outcome: Some(text(64)),
        kv_writes: writes,
        at_ms: u64::MAX,
        state_patch: Some(vec![b'x'; flo_workflow::state::STATE_BYTES_MAX]),
    };
    let step = Record::WfStepFinished {
        namespace: text(NAMESPACE_BYTES_MAX),
        run_id: text(RUN_ID_BYTES_MAX),
        step: text(256),
        outcome: crate::fold::record::StepOutcome::Named(text(256)),
        output: Some(vec![b'"'; STEP_OUTPUT_BYTES_MAX]),
        error: Some(text(TASK_ERROR_BYTES_MAX)),
        consumed_signal: Some(u64::MAX),
        next: StepNext::End {
            terminal: text(256),
            status: flo_protocol::WorkflowRunStatus::Failed,
            reason: Some(text(TASK_ERROR_BYTES_MAX)),
        },
        at_ms: u64::MAX,
        state_patch: Some(vec![b'x'; flo_workflow::state::STATE_BYTES_MAX]),
        ran: None,
        output_of_run: false,
    };
    let created = Record::RunCreated {
        namespace: text(NAMESPACE_BYTES_MAX),
        run_id: text(RUN_ID_BYTES_MAX),
        action: text(256),
        action_version: 1,
        input: vec![0; RUN_INPUT_BYTES_MAX],
        priority: 255,
        labels: Some(text(4096)),
        idempotency_key: Some(text(IDEMPOTENCY_KEY_BYTES_MAX)),
        created_at_ms: u64::MAX,
        available_at_ms: u64::MAX,
        step: None,
    };
    // A signal's payload is bounded by the request's frame.
    let signal = Record::WfSignalReceived {
        namespace: text(NAMESPACE_BYTES_MAX),
        run_id: text(RUN_ID_BYTES_MAX),
        signal_type: text(256),
        payload: vec![0; FRAME_BYTES_MAX],
        at_ms: u64::MAX,
    };
    for record in [completed, step, created, signal] {
        let n = size(&record);
        assert!(
            n < RECORD_PAYLOAD_BYTES_MAX,
            "type {} encodes to {n} bytes",
            record.type_code()
        );
    }
}
