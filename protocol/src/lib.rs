//! The flo wire protocol: length-prefixed MessagePack frames, the request and reply
//! messages shared by server, CLI, SDK and load test, and error values. No I/O here.

mod error;
mod frame;
mod message;
mod rules;
mod streams;

pub use error::{ErrorCode, ErrorValue, IDLE_CLOSED_PREFIX};
pub use frame::{
    FRAME_BYTES_MAX, FRAME_HEADER_BYTES, FrameError, MESSAGE_DEPTH_MAX, decode_frame,
    decode_payload, encode_frame, split_frame,
};
pub use message::{
    ACTION_NAME_BYTES_MAX, ActionInfo, ActionKind, ActionSpec, EVENTS_LIMIT_DEFAULT,
    EVENTS_LIMIT_MAX, HISTORY_LIMIT_DEFAULT, HISTORY_LIMIT_MAX, HistoryEvent, HistoryEventType,
    IDEMPOTENCY_KEY_BYTES_MAX, InvokeSpec, KV_KEY_BYTES_MAX, KV_LIST_LIMIT_DEFAULT,
    KV_LIST_LIMIT_MAX, KV_VALUE_BYTES_MAX, KV_WAIT_MS_MAX, KvEntry, LEASE_EXTEND_MS_MAX,
    ModuleCacheInfo, NAMESPACE_BYTES_MAX, Op, PROTOCOL_VERSION, PlanExecutorInfo, QueryPart,
    RUN_ID_BYTES_MAX, RUN_INPUT_BYTES_MAX, RUN_LIST_LIMIT_DEFAULT, RUN_LIST_LIMIT_MAX,
    RUN_WAIT_MS_MAX, Reply, Request, RequestId, Response, RunInfo, RunStatus, RunSummary,
    ScheduleInfo, ShardInfo, ShardMap, StatusInfo, TASK_AWAIT_MS_MAX, TASK_AWAIT_TASKS_MAX,
    TaskAssignment, TimedOutFilter, Token, ValidationIssue, WASM_ENTRYPOINT_BYTES_MAX,
    WEBHOOKS_LIMIT_DEFAULT, WEBHOOKS_LIMIT_MAX, WORKER_ID_BYTES_MAX, WORKER_METADATA_BYTES_MAX,
    WORKER_PROCESSES_MAX, WebhookDelivery, WorkerInfo, WorkerProcess, WorkerSpec, WorkerStatus,
    WorkerType, WorkflowBranchInfo, WorkflowControl, WorkflowEvent, WorkflowInfo, WorkflowRunInfo,
    WorkflowRunStatus, WorkflowStartSpec, WorkflowStepInfo, key_hash,
};
pub use rules::{
    DELAY_MS_ACCEPTED_MAX, Invalid, LABELS_BYTES_MAX, SharedScope, check_action_name,
    check_consumer_name, check_group_name, check_idempotency_key, check_labels, check_namespace,
    check_stream_name, check_stream_record, check_stream_ref, check_worker_id, shared_state_prefix,
};
pub use streams::{
    DEAD_LETTER_SUFFIX, GROUP_ACK_IDS_MAX, GROUP_BLOCK_MS_MAX, GROUP_CONSUMERS_MAX,
    GROUP_MAX_DELIVERIES_DEFAULT, GROUP_MESSAGE_TIMEOUT_MS_DEFAULT, GROUP_PENDING_MAX,
    GROUPS_PER_STREAM_MAX, GroupConfig, GroupInfo, GroupMode, GroupReadSpec, GroupStart,
    PendingRecord, STREAM_APPEND_RECORDS_MAX, STREAM_HEADERS_BYTES_MAX, STREAM_HEADERS_MAX,
    STREAM_KEY_BYTES_MAX, STREAM_NAME_BYTES_MAX, STREAM_PARTITIONS_MAX, STREAM_PAYLOAD_BYTES_MAX,
    STREAM_READ_COUNT_DEFAULT, STREAM_READ_COUNT_MAX, STREAMS_MAX, StreamConfig, StreamId,
    StreamInfo, StreamReadSpec, StreamRecord, StreamRecordIn,
};
