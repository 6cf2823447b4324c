//! Shard-to-shard traffic over glommio's channel mesh, batched: one message carries every
//! `PeerMsg` queued for a peer since the last send. Received messages become inputs.

use crate::inbox::{Inbox, Signal};
use flo_engine::{Input, PeerMsg};
use glommio::channels::channel_mesh::{MeshBuilder, Receivers, Senders};
use glommio::{Latency, Shares};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Messages in flight per direction between two shards.
pub(crate) const MESH_CHANNEL_MESSAGES: usize = 1024;

pub(crate) struct MeshMsg {
    // Boxed as the engine emits them: moved through queues as pointers, not 300-byte values.
    #[allow(clippy::vec_box)]
    pub msgs: Vec<Box<PeerMsg>>,
}

pub(crate) type Mesh = MeshBuilder<MeshMsg, glommio::channels::channel_mesh::Full>;

/// Executor ids by shard id, filled before joining: the mesh orders peers by executor id.
pub(crate) type ExecutorTable = Arc<Mutex<Vec<Option<usize>>>>;

/// Messages waiting to be sent to one peer.
#[derive(Default)]
pub(crate) struct PeerOut {
    #[allow(clippy::vec_box)]
    queue: RefCell<Vec<Box<PeerMsg>>>,
    signal: Signal,
}

impl PeerOut {
    pub fn push(&self, msg: Box<PeerMsg>) {
        self.queue.borrow_mut().push(msg);
        self.signal.notify();
    }

    /// Messages waiting for the sender task.
    pub fn len(&self) -> usize {
        self.queue.borrow().len()
    }
}

pub(crate) struct Joined {
    senders: Senders<MeshMsg>,
    receivers: Receivers<MeshMsg>,
    /// Mesh peer index of each shard.
    peer_of: Vec<usize>,
}

pub(crate) async fn join(mesh: Mesh, table: ExecutorTable, shard: u32) -> Result<Joined, String> {
    table.lock().map_err(|e| e.to_string())?[shard as usize] = Some(glommio::executor().id());
    let (senders, receivers) = mesh
        .join()
        .await
        .map_err(|e| format!("cannot join the shard mesh: {e}"))?;
    let ids: Vec<usize> = table
        .lock()
        .map_err(|e| e.to_string())?
        .iter()
        .map(|id| id.ok_or("a shard joined the mesh without registering"))
        .collect::<Result<_, _>>()?;
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    let peer_of = ids
        .iter()
        .map(|id| sorted.binary_search(id).unwrap_or(0))
        .collect();
    Ok(Joined {
        senders,
        receivers,
        peer_of,
    })
}

/// Starts a sender and a receiver task per peer shard.
pub(crate) fn spawn_tasks(
    shard: u32,
    mut joined: Joined,
    outs: &[Option<Rc<PeerOut>>],
    inbox: Rc<Inbox>,
) {
    let tq = glommio::executor().create_task_queue(
        Shares::Static(1000),
        Latency::Matters(Duration::from_micros(500)),
        "mesh",
    );
    let senders = Rc::new(joined.senders);
    let mut shard_of_peer = vec![0u32; joined.peer_of.len()];
    for (s, p) in joined.peer_of.iter().enumerate() {
        shard_of_peer[*p] = s as u32;
    }
    for (peer_index, rx) in joined.receivers.streams() {
        let from = shard_of_peer[peer_index];
        let inbox = inbox.clone();
        let task = glommio::spawn_local_into(
            async move {
                while let Some(msg) = rx.recv().await {
                    for msg in msg.msgs {
                        inbox.push_urgent(Input::Peer { from, msg });
                    }
                }
            },
            tq,
        );
        if let Ok(task) = task {
            task.detach();
        }
    }
    for (target, out) in outs.iter().enumerate() {
        let Some(out) = out.clone() else {
            continue;
        };
        let senders = senders.clone();
        let peer = joined.peer_of[target];
        let task = glommio::spawn_local_into(
            async move {
                loop {
                    out.signal.wait().await;
                    let msgs = std::mem::take(&mut *out.queue.borrow_mut());
                    if msgs.is_empty() {
                        continue;
                    }
                    if senders.send_to(peer, MeshMsg { msgs }).await.is_err() {
                        return;
                    }
                }
            },
            tq,
        );
        if let Ok(task) = task {
            task.detach();
        }
    }
    joined.peer_of.clear();
    let _ = shard;
}
