//! Shard-to-shard traffic over glommio's channel mesh, batched: one message carries every
//! request and reply queued for a peer since the last send.

use super::shard::{ReplyResult, ReplyTo, Shard, ShardOp};
use glommio::channels::channel_mesh::{MeshBuilder, Receivers, Senders};
use glommio::{Latency, Shares};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Messages in flight per direction between two shards.
pub(crate) const MESH_CHANNEL_MESSAGES: usize = 1024;

pub(crate) struct MeshMsg {
    pub requests: Vec<(u64, ShardOp)>,
    pub replies: Vec<(u64, ReplyResult)>,
}

pub(crate) type Mesh = MeshBuilder<MeshMsg, glommio::channels::channel_mesh::Full>;

/// Executor ids by shard id, filled before joining: the mesh orders peers by executor id.
pub(crate) type ExecutorTable = Arc<Mutex<Vec<Option<usize>>>>;

pub(crate) struct Joined {
    senders: Senders<MeshMsg>,
    receivers: Receivers<MeshMsg>,
    /// Mesh peer index of each shard.
    peer_of: Vec<usize>,
}

pub(crate) async fn join(mesh: Mesh, table: ExecutorTable, shard: u32) -> Joined {
    table.lock().unwrap()[shard as usize] = Some(glommio::executor().id());
    let (senders, receivers) = mesh.join().await.expect("join the shard mesh");
    let ids: Vec<usize> = table
        .lock()
        .unwrap()
        .iter()
        .map(|id| id.expect("every shard registered"))
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    let peer_of = ids
        .iter()
        .map(|id| sorted.binary_search(id).unwrap())
        .collect();
    Joined {
        senders,
        receivers,
        peer_of,
    }
}

/// Starts a sender and a receiver task per peer shard.
pub(crate) fn spawn_tasks(shard: Rc<Shard>, mut joined: Joined) {
    let tq = glommio::executor().create_task_queue(
        Shares::Static(1000),
        Latency::Matters(Duration::from_micros(500)),
        "mesh",
    );
    let senders = Rc::new(joined.senders);
    let shard_of_peer: Vec<u32> = {
        let mut v = vec![0; joined.peer_of.len()];
        for (s, p) in joined.peer_of.iter().enumerate() {
            v[*p] = s as u32;
        }
        v
    };
    for (peer_index, rx) in joined.receivers.streams() {
        let from = shard_of_peer[peer_index];
        let shard = shard.clone();
        glommio::spawn_local_into(
            async move {
                while let Some(msg) = rx.recv().await {
                    handle(&shard, from, msg);
                }
            },
            tq,
        )
        .expect("spawn mesh receiver")
        .detach();
    }
    for target in 0..shard.partitioning.shards {
        if target == shard.id {
            continue;
        }
        let (shard, senders) = (shard.clone(), senders.clone());
        let peer = joined.peer_of[target as usize];
        glommio::spawn_local_into(
            async move {
                let link = shard.peers[target as usize].as_ref().unwrap();
                loop {
                    link.signal.wait().await;
                    let msg = MeshMsg {
                        requests: std::mem::take(&mut *link.requests.borrow_mut()),
                        replies: link.replies.take_ready(),
                    };
                    if msg.requests.is_empty() && msg.replies.is_empty() {
                        continue;
                    }
                    if senders.send_to(peer, msg).await.is_err() {
                        return;
                    }
                }
            },
            tq,
        )
        .expect("spawn mesh sender")
        .detach();
    }
    joined.peer_of.clear();
}

fn handle(shard: &Rc<Shard>, from: u32, msg: MeshMsg) {
    for (tag, op) in msg.requests {
        super::dispatch::handle(shard, op, ReplyTo::Peer { shard: from, tag });
    }
    for (tag, result) in msg.replies {
        shard.complete(tag, result);
    }
}
