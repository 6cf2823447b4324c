//! What an action handler sees and returns: `ActionContext`, `ActionResult`,
//! `NonRetryableError`, and how a handler's return (or panic) becomes a task report.

use crate::client::{Error, FailMode, TaskRef};
use crate::mux::MuxClient;
use flo_protocol::TaskAssignment;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::any::Any;
use std::fmt;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Longest error text a failure report carries; longer texts are cut at a char boundary.
pub const ERROR_TEXT_BYTES_MAX: usize = 4096;

/// Any error a handler returns: `?` converts every `std::error::Error + Send + Sync`
/// (and `String` / `&str`) into it.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// What a handler returns.
pub type HandlerResult = Result<ActionResult, HandlerError>;

/// A registered handler.
pub(crate) type Handler = Arc<dyn Fn(&ActionContext) -> HandlerResult + Send + Sync>;

/// The output of a successful task: bytes, and optionally a named outcome (none means
/// `success`) that workflows route on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionResult {
    output: Vec<u8>,
    outcome: Option<String>,
    /// Fields (a JSON object) to set in a workflow step's run state.
    state: Option<Vec<u8>>,
}

impl ActionResult {
    /// No output.
    pub fn empty() -> Self {
        ActionResult::default()
    }

    /// `output` as is.
    pub fn bytes(output: impl Into<Vec<u8>>) -> Self {
        ActionResult {
            output: output.into(),
            outcome: None,
            state: None,
        }
    }

    /// `value` serialised to JSON.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> HandlerResult {
        Ok(ActionResult::bytes(serde_json::to_vec(value)?))
    }

    /// The same output under the named outcome (e.g. `approved`).
    pub fn with_outcome(mut self, outcome: impl Into<String>) -> Self {
        self.outcome = Some(outcome.into());
        self
    }

    /// For a workflow step's task: `fields` (a JSON object) are set in the run's state
    /// with the step's completion, after its output mapping (the server refuses anything
    /// but an object; a task that is no step's has no state to set).
    pub fn with_state(mut self, fields: &serde_json::Value) -> Self {
        self.state = Some(fields.to_string().into_bytes());
        self
    }

    pub fn output(&self) -> &[u8] {
        &self.output
    }

    /// The state fields set with `with_state`, as JSON.
    pub fn state(&self) -> Option<&[u8]> {
        self.state.as_deref()
    }

    /// The named outcome (`None`: `success`).
    pub fn outcome(&self) -> Option<&str> {
        self.outcome.as_deref()
    }

    pub fn into_output(self) -> Vec<u8> {
        self.output
    }
}

/// An error retrying cannot fix (invalid input, a business rule): the task fails at once,
/// with no further attempt and no dead-lettering.
///
/// ```
/// use flo::{ActionContext, HandlerResult, NonRetryableError, ActionResult};
///
/// fn validate(ctx: &ActionContext) -> HandlerResult {
///     let order: serde_json::Value = ctx.json()?;
///     if order["amount"].as_f64().unwrap_or(0.0) > 2000.0 {
///         return Err(NonRetryableError::new("order amount exceeds the $2000 limit").into());
///     }
///     ActionResult::json(&serde_json::json!({"valid": true}))
/// }
/// ```
///
/// It is recognised anywhere in the returned error's `source()` chain.
#[derive(Debug)]
pub struct NonRetryableError {
    message: String,
    source: Option<HandlerError>,
}

impl NonRetryableError {
    pub fn new(message: impl Into<String>) -> Self {
        NonRetryableError {
            message: message.into(),
            source: None,
        }
    }

    /// Marks `source` as not worth retrying, with `message` in front of it.
    pub fn with_source(message: impl Into<String>, source: impl Into<HandlerError>) -> Self {
        NonRetryableError {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

/// An error with a code (`invalid_card`, `rate_limited`) the server records with the
/// failure: an inline plan's `errors:` classify it — a fatal code skips the executor's
/// retries, a retryable one retries it. Recognised anywhere in the returned error's
/// `source()` chain; combine with `NonRetryableError` as its source to also stop retries.
///
/// ```
/// use flo::{ActionContext, ActionResult, CodedError, HandlerResult};
///
/// fn charge(ctx: &ActionContext) -> HandlerResult {
///     Err(CodedError::new("invalid_card", "the card number fails its check digit").into())
/// }
/// ```
#[derive(Debug)]
pub struct CodedError {
    code: String,
    message: String,
}

impl CodedError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        CodedError {
            code: code.into(),
            message: message.into(),
        }
    }

    pub fn code(&self) -> &str {
        &self.code
    }
}

impl fmt::Display for CodedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for CodedError {}

impl fmt::Display for NonRetryableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for NonRetryableError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// The connection a worker currently has (none while it reconnects), shared by the
/// worker's threads and the contexts of its tasks.
#[derive(Default)]
pub(crate) struct Session {
    client: Mutex<Option<Arc<MuxClient>>>,
}

impl Session {
    pub fn current(&self) -> Option<Arc<MuxClient>> {
        self.client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Installs `client`, returning the one it replaces.
    pub fn replace(&self, client: Option<Arc<MuxClient>>) -> Option<Arc<MuxClient>> {
        std::mem::replace(
            &mut *self.client.lock().unwrap_or_else(PoisonError::into_inner),
            client,
        )
    }
}

/// What a handler gets: the task (its id, action, attempt, input) and a way to extend its
/// lease.
pub struct ActionContext {
    task: TaskAssignment,
    worker_id: Arc<str>,
    session: Arc<Session>,
    lease_expires_at_ms: AtomicU64,
}

impl ActionContext {
    pub(crate) fn new(task: TaskAssignment, worker_id: Arc<str>, session: Arc<Session>) -> Self {
        let lease_expires_at_ms = AtomicU64::new(task.lease_expires_at_ms);
        ActionContext {
            task,
            worker_id,
            session,
            lease_expires_at_ms,
        }
    }

    /// A context attached to no server, for testing handlers: everything but `touch`
    /// works (`touch` fails with `Error::Io`).
    pub fn detached(task: TaskAssignment) -> Self {
        Self::new(task, Arc::from("detached"), Arc::default())
    }

    /// The task's id, which is its run's id (e.g. `process-order-1`).
    pub fn task_id(&self) -> &str {
        &self.task.task_id
    }

    pub fn action_name(&self) -> &str {
        &self.task.action
    }

    /// From 1; increments on each retry.
    pub fn attempt(&self) -> u32 {
        self.task.attempt
    }

    /// When the run was invoked, in ms since the Unix epoch.
    pub fn created_at_ms(&self) -> u64 {
        self.task.created_at_ms
    }

    pub fn namespace(&self) -> &str {
        &self.task.namespace
    }

    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    pub fn priority(&self) -> u8 {
        self.task.priority
    }

    /// When the lease on the task ends (ms since the Unix epoch), as of the last `touch`.
    pub fn lease_expires_at_ms(&self) -> u64 {
        self.lease_expires_at_ms.load(Ordering::Relaxed)
    }

    /// The raw input given to the invocation.
    pub fn input(&self) -> &[u8] {
        &self.task.payload
    }

    /// The input parsed as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.task.payload)
    }

    /// A workflow step's task: its run's state when the task was leased (a JSON object;
    /// None for a task that is no step's). Set fields with `ActionResult::with_state`.
    pub fn state(&self) -> Option<serde_json::Value> {
        let state = self.task.state.as_deref()?;
        serde_json::from_slice(state).ok()
    }

    /// Extends the task's lease to `extend_ms` from now (call it periodically during long
    /// work, so the task is not handed to another worker); returns when the lease now
    /// expires.
    pub fn touch(&self, extend_ms: u64) -> Result<u64, Error> {
        let Some(client) = self.session.current() else {
            return Err(Error::Io(io::Error::new(
                io::ErrorKind::NotConnected,
                "the worker is not connected to the server",
            )));
        };
        let expires_at_ms = client.touch_task(&self.worker_id, &self.task_ref(), extend_ms)?;
        self.lease_expires_at_ms
            .store(expires_at_ms, Ordering::Relaxed);
        Ok(expires_at_ms)
    }

    /// A result with a named outcome: `value` as JSON, routed by workflows along the
    /// transition called `outcome` (e.g. `approved`).
    pub fn result<T: Serialize + ?Sized>(&self, outcome: &str, value: &T) -> HandlerResult {
        if outcome.is_empty() {
            return Err("an outcome name must not be empty".into());
        }
        Ok(ActionResult::json(value)?.with_outcome(outcome))
    }

    pub(crate) fn task_ref(&self) -> TaskRef<'_> {
        TaskRef::from(&self.task)
    }
}

/// How a task ends, as reported to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Report {
    Complete(ActionResult),
    Fail {
        error: String,
        mode: FailMode,
        /// The code of the first `CodedError` in the error's chain.
        code: Option<String>,
    },
}

/// Runs `handler`, turning its error or panic into a failure report.
pub(crate) fn run_handler(
    handler: &(dyn Fn(&ActionContext) -> HandlerResult + Send + Sync),
    ctx: &ActionContext,
) -> Report {
    match panic::catch_unwind(AssertUnwindSafe(|| handler(ctx))) {
        Ok(Ok(result)) => Report::Complete(result),
        Ok(Err(error)) => failure(&*error),
        Err(payload) => Report::Fail {
            error: truncate(format!(
                "the action handler panicked: {}",
                panic_message(&*payload)
            )),
            mode: FailMode::Retry,
            code: None,
        },
    }
}

/// A failure report for `error`: not retried when a `NonRetryableError` is in its chain.
pub(crate) fn failure(error: &(dyn std::error::Error + 'static)) -> Report {
    let mode = if is_non_retryable(error) {
        FailMode::NonRetryable
    } else {
        FailMode::Retry
    };
    let code = std::iter::successors(Some(error), |e| e.source())
        .find_map(|e| e.downcast_ref::<CodedError>())
        .map(|c| c.code.clone());
    Report::Fail {
        error: truncate(error_text(error)),
        mode,
        code,
    }
}

fn is_non_retryable(error: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(error), |e| e.source()).any(|e| e.is::<NonRetryableError>())
}

/// The error and its sources, `: `-separated; a source whose text the previous already
/// ends with is skipped.
fn error_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    for source in std::iter::successors(error.source(), |e| e.source()) {
        let part = source.to_string();
        if !part.is_empty() && !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
    }
    text
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "a non-string panic payload"
    }
}

fn truncate(mut text: String) -> String {
    if text.len() > ERROR_TEXT_BYTES_MAX {
        let mut end = ERROR_TEXT_BYTES_MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(action: &str, payload: &str) -> TaskAssignment {
        TaskAssignment {
            task_id: format!("{action}-1"),
            action: action.into(),
            namespace: "default".into(),
            payload: payload.as_bytes().to_vec(),
            attempt: 2,
            priority: 10,
            created_at_ms: 1_000,
            lease_expires_at_ms: 31_000,
            state: None,
        }
    }

    fn run(handler: impl Fn(&ActionContext) -> HandlerResult + Send + Sync) -> Report {
        run_handler(&handler, &ActionContext::detached(task("echo", "{}")))
    }

    fn fail_mode(report: &Report) -> FailMode {
        match report {
            Report::Fail { mode, .. } => *mode,
            Report::Complete(r) => panic!("expected a failure, got {r:?}"),
        }
    }

    fn error_of(report: &Report) -> &str {
        match report {
            Report::Fail { error, .. } => error,
            Report::Complete(r) => panic!("expected a failure, got {r:?}"),
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("charging the card failed")]
    struct Wrapper(#[source] NonRetryableError);

    #[test]
    fn returned_error_fails_with_retry() {
        let report = run(|_| Err("payment gateway unavailable".into()));
        assert_eq!(fail_mode(&report), FailMode::Retry);
        assert_eq!(error_of(&report), "payment gateway unavailable");
    }

    #[test]
    fn question_mark_on_a_parse_error_fails_with_retry() {
        let report = run(|ctx| {
            let _: u32 = ctx.json()?;
            Ok(ActionResult::empty())
        });
        assert_eq!(fail_mode(&report), FailMode::Retry);
        assert!(error_of(&report).contains("invalid type"), "{report:?}");
    }

    #[test]
    fn a_coded_error_reports_its_code_also_wrapped_as_non_retryable() {
        let report = run(|_| Err(CodedError::new("invalid_card", "bad check digit").into()));
        assert_eq!(fail_mode(&report), FailMode::Retry);
        assert_eq!(error_of(&report), "invalid_card: bad check digit");
        let Report::Fail { code, .. } = &report else {
            panic!("a failure")
        };
        assert_eq!(code.as_deref(), Some("invalid_card"));
        let report = run(|_| {
            let coded = CodedError::new("fraud_detected", "blocked");
            Err(NonRetryableError::with_source("refused", coded).into())
        });
        assert_eq!(fail_mode(&report), FailMode::NonRetryable);
        let Report::Fail { code, .. } = &report else {
            panic!("a failure")
        };
        assert_eq!(code.as_deref(), Some("fraud_detected"));
    }

    #[test]
    fn non_retryable_error_fails_without_retry() {
        let report = run(|_| Err(NonRetryableError::new("amount exceeds $2000").into()));
        assert_eq!(fail_mode(&report), FailMode::NonRetryable);
        assert_eq!(error_of(&report), "amount exceeds $2000");
    }

    #[test]
    fn non_retryable_error_is_found_in_the_source_chain() {
        let report = run(|_| Err(Wrapper(NonRetryableError::new("card declined")).into()));
        assert_eq!(fail_mode(&report), FailMode::NonRetryable);
        assert_eq!(error_of(&report), "charging the card failed: card declined");
    }

    #[test]
    fn non_retryable_error_keeps_its_source_in_the_text() {
        let parse = serde_json::from_str::<u32>("x").unwrap_err();
        let report = run(move |_| {
            Err(NonRetryableError::with_source("invalid input", parse.to_string()).into())
        });
        assert_eq!(fail_mode(&report), FailMode::NonRetryable);
        assert!(error_of(&report).starts_with("invalid input: expected value"));
    }

    #[test]
    fn panic_fails_with_retry_and_says_the_handler_panicked() {
        let report = run(|_| panic!("index out of range"));
        assert_eq!(fail_mode(&report), FailMode::Retry);
        assert_eq!(
            error_of(&report),
            "the action handler panicked: index out of range"
        );
        let report = run(|ctx| panic!("order {} is corrupt", ctx.task_id()));
        assert_eq!(
            error_of(&report),
            "the action handler panicked: order echo-1 is corrupt"
        );
    }

    #[test]
    fn long_error_text_is_cut_at_a_char_boundary() {
        let report = run(|_| Err("é".repeat(ERROR_TEXT_BYTES_MAX).into()));
        let error = error_of(&report);
        assert!(error.len() <= ERROR_TEXT_BYTES_MAX && error.len() > ERROR_TEXT_BYTES_MAX - 4);
        assert!(error.chars().all(|c| c == 'é'));
    }

    #[test]
    fn successful_handler_completes_with_its_output() {
        let report = run(|ctx| Ok(ActionResult::bytes(ctx.input().to_vec())));
        assert_eq!(report, Report::Complete(ActionResult::bytes("{}")));
    }

    #[test]
    fn action_result_helpers() {
        assert_eq!(ActionResult::empty().output(), b"");
        assert_eq!(ActionResult::empty().outcome(), None);
        assert_eq!(ActionResult::bytes(vec![1, 2]).into_output(), vec![1, 2]);
        let json = ActionResult::json(&serde_json::json!({"status": "done"})).unwrap();
        assert_eq!(json.output(), br#"{"status":"done"}"#);
        assert_eq!(json.outcome(), None);
        let named = ActionResult::bytes("x").with_outcome("approved");
        assert_eq!(named.outcome(), Some("approved"));
    }

    #[test]
    fn context_result_names_the_outcome() {
        let ctx = ActionContext::detached(task("review-order", r#"{"amount":50}"#));
        let result = ctx
            .result(
                "approved",
                &serde_json::json!({"decision": "auto-approved"}),
            )
            .unwrap();
        assert_eq!(result.outcome(), Some("approved"));
        assert_eq!(result.output(), br#"{"decision":"auto-approved"}"#);
        assert!(ctx.result("", &1).is_err());
    }

    #[test]
    fn context_exposes_the_task() {
        #[derive(serde::Deserialize)]
        struct Order {
            amount: u32,
        }
        let ctx = ActionContext::detached(task("review-order", r#"{"amount":50}"#));
        assert_eq!(ctx.task_id(), "review-order-1");
        assert_eq!(ctx.action_name(), "review-order");
        assert_eq!(ctx.attempt(), 2);
        assert_eq!(ctx.created_at_ms(), 1_000);
        assert_eq!(ctx.namespace(), "default");
        assert_eq!(ctx.lease_expires_at_ms(), 31_000);
        assert_eq!(ctx.input(), br#"{"amount":50}"#);
        assert_eq!(ctx.json::<Order>().unwrap().amount, 50);
    }

    #[test]
    fn touch_without_a_connection_fails_with_io() {
        let ctx = ActionContext::detached(task("echo", ""));
        assert!(matches!(ctx.touch(1_000), Err(Error::Io(_))));
    }
}
