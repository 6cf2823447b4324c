//! Tests only: a stand-in for the flo server that answers the handshake, invokes, worker
//! registration, task awaits and completions from memory.

use flo::protocol::{
    ErrorValue, Op, PROTOCOL_VERSION, Reply, Request, Response, TaskAssignment, WorkerInfo,
    WorkerStatus, decode_frame, encode_frame,
};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

/// A stand-in for the server, enough for this workload: one in-memory task queue that
/// invocations fill and awaits drain; one thread per connection, requests in order.
#[derive(Default)]
pub struct FakeServer {
    pub queue: Mutex<VecDeque<TaskAssignment>>,
    queued: Condvar,
    runs: AtomicU64,
    pub completed: AtomicU64,
}

impl FakeServer {
    pub fn start() -> (Arc<FakeServer>, String) {
        let fake = Arc::new(FakeServer::default());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = fake.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let server = server.clone();
                thread::spawn(move || server.serve(stream.unwrap()));
            }
        });
        (fake, addr)
    }

    fn serve(&self, mut stream: TcpStream) {
        let (mut buf, mut chunk, mut out) = (Vec::new(), vec![0; 64 << 10], Vec::new());
        loop {
            while let Some((request, used)) = decode_frame::<Request>(&buf).unwrap() {
                buf.drain(..used);
                let result = self.answer(request.op);
                encode_frame(
                    &Response {
                        id: request.id,
                        result,
                    },
                    &mut out,
                )
                .unwrap();
            }
            if stream.write_all(&out).is_err() {
                return;
            }
            out.clear();
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn answer(&self, op: Op) -> Result<Reply, ErrorValue> {
        Ok(match op {
            Op::Hello { .. } => Reply::Hello {
                protocol_version: PROTOCOL_VERSION,
                server_version: "fake".into(),
                shard_count: 1,
                partitions: 1,
                shard: None,
            },
            Op::ActionInvoke(spec) => {
                let run_id = format!("{}-{}", spec.action, self.runs.fetch_add(1, Relaxed));
                self.queue.lock().unwrap().push_back(TaskAssignment {
                    task_id: run_id.clone(),
                    action: spec.action,
                    namespace: spec.namespace,
                    payload: spec.input,
                    attempt: 1,
                    priority: 10,
                    created_at_ms: 0,
                    lease_expires_at_ms: 0,
                    state: None,
                });
                self.queued.notify_all();
                Reply::Invoked {
                    run_id,
                    created: true,
                }
            }
            Op::WorkerRegister(spec) => Reply::Worker(WorkerInfo {
                worker_id: spec.worker_id,
                namespace: spec.namespace,
                worker_type: spec.worker_type,
                status: WorkerStatus::Active,
                max_concurrency: spec.max_concurrency.unwrap_or(10),
                current_load: 0,
                tasks_completed: 0,
                tasks_failed: 0,
                registered_at_ms: 0,
                last_heartbeat_ms: 0,
                machine_id: None,
                metadata: None,
                labels: None,
                processes: Vec::new(),
            }),
            Op::TaskAwait {
                max_tasks,
                block_ms,
                ..
            } => {
                let queue = self.queue.lock().unwrap();
                let (mut queue, _) = self
                    .queued
                    .wait_timeout_while(queue, Duration::from_millis(block_ms), |q| q.is_empty())
                    .unwrap();
                let take = queue.len().min(max_tasks as usize);
                Reply::Tasks(queue.drain(..take).collect())
            }
            Op::TaskComplete { .. } => {
                self.completed.fetch_add(1, Relaxed);
                Reply::Done
            }
            Op::WorkerHeartbeat { .. } => Reply::WorkerStatus {
                status: WorkerStatus::Active,
            },
            Op::WorkerDeregister { .. } => Reply::Done,
            other => return Err(ErrorValue::bad_request(format!("fake: {other:?}"))),
        })
    }
}
