//! The worker registry of one shard: workers whose id hashes here. In memory, as in the
//! reference product: after a restart workers register again (their tasks' leases are
//! durable, the registry is not).

use crate::tables::HashMap;
use flo_protocol::{
    ErrorValue, WORKER_METADATA_BYTES_MAX, WORKER_PROCESSES_MAX, WorkerInfo, WorkerProcess,
    WorkerSpec, WorkerStatus, WorkerType,
};
use flo_protocol::{check_labels, check_namespace, check_worker_id};
use serde_json::{Map, Value};

/// Most workers registered on one shard.
pub const WORKERS_PER_SHARD_MAX: usize = 10_000;
/// Of those, one namespace's at most.
pub const WORKERS_PER_NAMESPACE_MAX: usize = crate::shares::share_of(WORKERS_PER_SHARD_MAX);
/// A worker silent this long is `unhealthy`.
pub const HEARTBEAT_TIMEOUT_MS: u64 = 90_000;
pub const MAX_CONCURRENCY_DEFAULT: u32 = 10;
const MACHINE_ID_BYTES_MAX: usize = 256;

pub struct Worker {
    pub worker_type: WorkerType,
    pub status: WorkerStatus,
    pub max_concurrency: u32,
    /// Tasks in flight: what the last heartbeat said, plus the tasks handed to the worker
    /// since, minus those it reported done since (the next heartbeat says again). Tasks
    /// are offered only below `max_concurrency` (`awaits.rs`).
    pub current_load: u32,
    pub tasks_completed: u64,
    pub tasks_failed: u64,
    pub registered_at_ms: u64,
    pub last_heartbeat_ms: u64,
    pub machine_id: Option<String>,
    pub metadata: Option<String>,
    pub labels: Option<String>,
    /// `labels`, parsed once for matching.
    pub label_map: Option<Map<String, Value>>,
    pub processes: Vec<WorkerProcess>,
}

impl Worker {
    pub fn processes_action(&self, action: &str) -> bool {
        self.processes.iter().any(|p| p.name == action)
    }

    pub fn is_draining(&self) -> bool {
        self.status == WorkerStatus::Draining
    }
}

#[derive(Default)]
pub struct WorkerRegistry {
    workers: HashMap<(String, String), Worker>,
    /// Workers whose load went down since the last look (`take_lowered`): an await held
    /// while they were at their concurrency may go on.
    lowered: Vec<(String, String)>,
}

/// Whether a worker with `worker` labels may run a task requiring `required`: every
/// required key present with an equal (flat) value.
pub fn labels_match(required: Option<&str>, worker: Option<&Map<String, Value>>) -> bool {
    let Some(required) = required else {
        return true;
    };
    let Ok(Value::Object(required)) = serde_json::from_str::<Value>(required) else {
        return false;
    };
    if required.is_empty() {
        return true;
    }
    let Some(worker) = worker else {
        return false;
    };
    required.iter().all(|(k, v)| worker.get(k) == Some(v))
}

impl WorkerRegistry {
    /// Workers registered here, by status (active, idle, draining, unhealthy).
    pub fn count_by_status(&self) -> [u64; 4] {
        let mut counts = [0; 4];
        for worker in self.workers.values() {
            let at = match worker.status {
                WorkerStatus::Active => 0,
                WorkerStatus::Idle => 1,
                WorkerStatus::Draining => 2,
                WorkerStatus::Unhealthy => 3,
            };
            counts[at] += 1;
        }
        counts
    }

    pub fn get(&self, namespace: &str, worker_id: &str) -> Option<&Worker> {
        self.workers
            .get(crate::tables::pair(&(namespace, worker_id)))
    }

    fn get_mut(&mut self, namespace: &str, worker_id: &str) -> Option<&mut Worker> {
        self.workers
            .get_mut(crate::tables::pair(&(namespace, worker_id)))
    }

    pub fn require(&self, namespace: &str, worker_id: &str) -> Result<&Worker, ErrorValue> {
        self.get(namespace, worker_id)
            .ok_or_else(|| not_registered(namespace, worker_id))
    }

    /// Registers a worker, replacing an earlier registration of the same id.
    pub fn register(&mut self, spec: WorkerSpec, now_ms: u64) -> Result<WorkerInfo, ErrorValue> {
        check_namespace(&spec.namespace)?;
        check_worker_id(&spec.worker_id)?;
        let max_concurrency = spec.max_concurrency.unwrap_or(MAX_CONCURRENCY_DEFAULT);
        if max_concurrency == 0 {
            return Err(ErrorValue::bad_request(
                "max_concurrency must be at least 1",
            ));
        }
        if spec.processes.len() > WORKER_PROCESSES_MAX {
            return Err(ErrorValue::bad_request(format!(
                "a worker may list at most {WORKER_PROCESSES_MAX} processes"
            )));
        }
        if let Some(p) = spec
            .processes
            .iter()
            .find(|p| p.is_empty() || p.len() > 512)
        {
            return Err(ErrorValue::bad_request(format!(
                "process name {p:?} must be 1 to 512 bytes"
            )));
        }
        if let Some(metadata) = &spec.metadata {
            if metadata.len() > WORKER_METADATA_BYTES_MAX {
                return Err(ErrorValue::bad_request(format!(
                    "metadata must be at most {WORKER_METADATA_BYTES_MAX} bytes"
                )));
            }
            serde_json::from_str::<Value>(metadata)
                .map_err(|e| ErrorValue::bad_request(format!("metadata must be JSON: {e}")))?;
        }
        if spec
            .machine_id
            .as_ref()
            .is_some_and(|m| m.len() > MACHINE_ID_BYTES_MAX)
        {
            return Err(ErrorValue::bad_request(format!(
                "machine id must be at most {MACHINE_ID_BYTES_MAX} bytes"
            )));
        }
        let label_map = match &spec.labels {
            Some(labels) => {
                check_labels(labels)?;
                match serde_json::from_str::<Value>(labels) {
                    Ok(Value::Object(map)) => Some(map),
                    _ => None,
                }
            }
            None => None,
        };
        let key = (spec.namespace.clone(), spec.worker_id.clone());
        if !self.workers.contains_key(&key) && self.workers.len() >= WORKERS_PER_SHARD_MAX {
            return Err(ErrorValue::new(
                flo_protocol::ErrorCode::Overloaded,
                format!(
                    "this shard already has {WORKERS_PER_SHARD_MAX} workers registered; \
                     deregister idle ones first"
                ),
            ));
        }
        // A namespace's share of the shard's workers (registering is rare: a count will do).
        if !self.workers.contains_key(&key)
            && self
                .workers
                .keys()
                .filter(|(ns, _)| *ns == spec.namespace)
                .count()
                >= WORKERS_PER_NAMESPACE_MAX
        {
            return Err(ErrorValue::new(
                flo_protocol::ErrorCode::Overloaded,
                format!(
                    "namespace {:?} already has {WORKERS_PER_NAMESPACE_MAX} workers registered on \
                     this shard (its share of {WORKERS_PER_SHARD_MAX}); deregister idle ones \
                     first",
                    spec.namespace
                ),
            ));
        }
        let kind = match spec.worker_type {
            WorkerType::Action => "action",
            WorkerType::Stream => "stream_consumer",
        };
        let mut processes: Vec<WorkerProcess> = Vec::with_capacity(spec.processes.len());
        for name in spec.processes {
            if processes.iter().all(|p| p.name != name) {
                processes.push(WorkerProcess {
                    name,
                    kind: kind.to_string(),
                    run_count: 0,
                    fail_count: 0,
                    last_run_at_ms: None,
                });
            }
        }
        let worker = Worker {
            worker_type: spec.worker_type,
            status: WorkerStatus::Active,
            max_concurrency,
            current_load: 0,
            tasks_completed: 0,
            tasks_failed: 0,
            registered_at_ms: now_ms,
            last_heartbeat_ms: now_ms,
            machine_id: spec.machine_id,
            metadata: spec.metadata,
            labels: spec.labels,
            label_map,
            processes,
        };
        let info = worker_info(&key.0, &key.1, &worker);
        self.workers.insert(key, worker);
        Ok(info)
    }

    /// Records a heartbeat; returns the worker's status: `active`, whatever its load (a
    /// heartbeat makes an unhealthy worker healthy again, as in the spec's diagram), or
    /// `draining` once drained (sticky).
    pub fn heartbeat(
        &mut self,
        namespace: &str,
        worker_id: &str,
        current_load: u32,
        now_ms: u64,
    ) -> Result<WorkerStatus, ErrorValue> {
        let worker = self
            .get_mut(namespace, worker_id)
            .ok_or_else(|| not_registered(namespace, worker_id))?;
        worker.last_heartbeat_ms = now_ms;
        let lowered = current_load < worker.current_load;
        worker.current_load = current_load;
        if worker.is_draining() {
            return Ok(WorkerStatus::Draining);
        }
        worker.status = WorkerStatus::Active;
        if lowered {
            self.note_lowered(namespace, worker_id);
        }
        Ok(WorkerStatus::Active)
    }

    pub fn drain(&mut self, namespace: &str, worker_id: &str) -> Result<WorkerInfo, ErrorValue> {
        let worker = self
            .get_mut(namespace, worker_id)
            .ok_or_else(|| not_registered(namespace, worker_id))?;
        worker.status = WorkerStatus::Draining;
        let info = worker_info(namespace, worker_id, worker);
        Ok(info)
    }

    pub fn deregister(&mut self, namespace: &str, worker_id: &str) -> Result<(), ErrorValue> {
        self.workers
            .remove(crate::tables::pair(&(namespace, worker_id)))
            .map(|_| ())
            .ok_or_else(|| not_registered(namespace, worker_id))
    }

    pub fn info(&self, namespace: &str, worker_id: &str) -> Result<WorkerInfo, ErrorValue> {
        let worker = self.require(namespace, worker_id)?;
        Ok(worker_info(namespace, worker_id, worker))
    }

    /// Workers of a namespace, by id.
    pub fn list(&self, namespace: &str) -> Vec<WorkerInfo> {
        let mut list: Vec<WorkerInfo> = self
            .workers
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|((ns, id), w)| worker_info(ns, id, w))
            .collect();
        list.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        list
    }

    /// Tasks the worker may still take: its concurrency less its load (0 for a worker not
    /// registered).
    pub fn free_slots(&self, namespace: &str, worker_id: &str) -> u32 {
        self.get(namespace, worker_id)
            .map_or(0, |w| w.max_concurrency.saturating_sub(w.current_load))
    }

    /// `tasks` more tasks were handed to the worker.
    pub fn add_load(&mut self, namespace: &str, worker_id: &str, tasks: u32) {
        if let Some(worker) = self.get_mut(namespace, worker_id) {
            worker.current_load = worker.current_load.saturating_add(tasks);
        }
    }

    /// The workers whose load went down since the last call.
    pub fn take_lowered(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.lowered)
    }

    /// Counts a task the worker finished (`ok`) or failed: one task less in flight.
    pub fn record_task(
        &mut self,
        namespace: &str,
        worker_id: &str,
        action: &str,
        ok: bool,
        at_ms: u64,
    ) {
        let Some(worker) = self.get_mut(namespace, worker_id) else {
            return;
        };
        if ok {
            worker.tasks_completed += 1;
        } else {
            worker.tasks_failed += 1;
        }
        let lowered = worker.current_load > 0;
        worker.current_load = worker.current_load.saturating_sub(1);
        if let Some(p) = worker.processes.iter_mut().find(|p| p.name == action) {
            if ok {
                p.run_count += 1;
            } else {
                p.fail_count += 1;
            }
            p.last_run_at_ms = Some(at_ms);
        }
        if lowered {
            self.note_lowered(namespace, worker_id);
        }
    }

    /// Notes that the worker's load went down, once until the next `take_lowered` (taken
    /// after each input: a few workers at most).
    fn note_lowered(&mut self, namespace: &str, worker_id: &str) {
        if !self
            .lowered
            .iter()
            .any(|(n, w)| n == namespace && w == worker_id)
        {
            self.lowered
                .push((namespace.to_string(), worker_id.to_string()));
        }
    }

    /// Marks workers silent for `HEARTBEAT_TIMEOUT_MS` unhealthy; returns how many.
    pub fn check_health(&mut self, now_ms: u64) -> usize {
        let mut marked = 0;
        for worker in self.workers.values_mut() {
            let silent = now_ms.saturating_sub(worker.last_heartbeat_ms) >= HEARTBEAT_TIMEOUT_MS;
            if silent && matches!(worker.status, WorkerStatus::Active | WorkerStatus::Idle) {
                worker.status = WorkerStatus::Unhealthy;
                marked += 1;
            }
        }
        marked
    }
}

fn not_registered(namespace: &str, worker_id: &str) -> ErrorValue {
    ErrorValue::not_found(format!(
        "worker {worker_id:?} is not registered in namespace {namespace:?}; register it first \
         (flo worker register {worker_id} ACTION...)"
    ))
}

pub fn worker_info(namespace: &str, worker_id: &str, w: &Worker) -> WorkerInfo {
    WorkerInfo {
        worker_id: worker_id.to_string(),
        namespace: namespace.to_string(),
        worker_type: w.worker_type,
        status: w.status,
        max_concurrency: w.max_concurrency,
        current_load: w.current_load,
        tasks_completed: w.tasks_completed,
        tasks_failed: w.tasks_failed,
        registered_at_ms: w.registered_at_ms,
        last_heartbeat_ms: w.last_heartbeat_ms,
        machine_id: w.machine_id.clone(),
        metadata: w.metadata.clone(),
        labels: w.labels.clone(),
        processes: w.processes.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str) -> WorkerSpec {
        WorkerSpec {
            namespace: "ns".into(),
            worker_id: id.into(),
            worker_type: WorkerType::Action,
            max_concurrency: None,
            processes: vec!["a".into(), "b".into()],
            metadata: None,
            machine_id: None,
            labels: Some(r#"{"gpu":true,"vram_gb":24}"#.into()),
        }
    }

    #[test]
    fn labels_match_requires_equal_flat_values() {
        let worker: Map<String, Value> =
            serde_json::from_str(r#"{"gpu":true,"vram_gb":24,"region":"us-east"}"#).unwrap();
        assert!(labels_match(None, Some(&worker)));
        assert!(labels_match(
            Some(r#"{"gpu":true,"vram_gb":24}"#),
            Some(&worker)
        ));
        assert!(!labels_match(
            Some(r#"{"gpu":true,"vram_gb":16}"#),
            Some(&worker)
        ));
        assert!(!labels_match(Some(r#"{"tpu":true}"#), Some(&worker)));
        assert!(!labels_match(Some(r#"{"gpu":true}"#), None));
        assert!(labels_match(Some("{}"), None));
    }

    #[test]
    fn unhealthy_after_silence_and_back_on_heartbeat() {
        let mut reg = WorkerRegistry::default();
        reg.register(spec("w1"), 1_000).unwrap();
        assert_eq!(reg.check_health(1_000 + HEARTBEAT_TIMEOUT_MS - 1), 0);
        assert_eq!(reg.check_health(1_000 + HEARTBEAT_TIMEOUT_MS), 1);
        assert_eq!(
            reg.info("ns", "w1").unwrap().status,
            WorkerStatus::Unhealthy
        );
        let status = reg.heartbeat("ns", "w1", 3, 200_000).unwrap();
        assert_eq!(status, WorkerStatus::Active);
    }

    /// Heartbeat → active, at any load (the spec's status diagram); never `idle`.
    #[test]
    fn a_heartbeat_answers_and_shows_active_at_any_load() {
        let mut reg = WorkerRegistry::default();
        reg.register(spec("w1"), 0).unwrap();
        for load in [0, 4, 0] {
            assert_eq!(
                reg.heartbeat("ns", "w1", load, 1).unwrap(),
                WorkerStatus::Active
            );
            let info = reg.info("ns", "w1").unwrap();
            assert_eq!(
                (info.status, info.current_load),
                (WorkerStatus::Active, load)
            );
        }
    }

    #[test]
    fn draining_is_sticky() {
        let mut reg = WorkerRegistry::default();
        reg.register(spec("w1"), 0).unwrap();
        reg.drain("ns", "w1").unwrap();
        assert_eq!(
            reg.heartbeat("ns", "w1", 0, 1).unwrap(),
            WorkerStatus::Draining
        );
        assert_eq!(reg.check_health(HEARTBEAT_TIMEOUT_MS * 2), 0);
        assert_eq!(reg.info("ns", "w1").unwrap().status, WorkerStatus::Draining);
    }

    #[test]
    fn counts_per_process() {
        let mut reg = WorkerRegistry::default();
        reg.register(spec("w1"), 0).unwrap();
        reg.record_task("ns", "w1", "a", true, 5);
        reg.record_task("ns", "w1", "a", false, 6);
        let info = reg.info("ns", "w1").unwrap();
        assert_eq!((info.tasks_completed, info.tasks_failed), (1, 1));
        assert_eq!(info.processes[0].run_count, 1);
        assert_eq!(info.processes[0].fail_count, 1);
        assert_eq!(info.processes[0].last_run_at_ms, Some(6));
    }

    #[test]
    fn bad_registrations_are_refused() {
        let mut reg = WorkerRegistry::default();
        let mut s = spec("");
        assert!(reg.register(s.clone(), 0).is_err());
        s.worker_id = "w".into();
        s.labels = Some(r#"{"a":[1]}"#.into());
        assert!(reg.register(s.clone(), 0).is_err());
        s.labels = None;
        s.metadata = Some("not json".into());
        assert!(reg.register(s.clone(), 0).is_err());
        s.metadata = None;
        s.max_concurrency = Some(0);
        assert!(reg.register(s, 0).is_err());
        assert!(reg.info("ns", "w").is_err());
    }
}
