//! Delivers guest KV writes whose keys belong to other shards. The writes are durable in
//! this shard's log with the run's completion; this task sends them to their owners
//! (which apply each origin LSN at most once) and then logs `KvForwarded`. After a crash
//! the unforwarded ones are sent again.

use super::shard::{Shard, ShardOp};
use crate::record::{GuestKvWrite, Record};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

/// Completions forwarded per round.
const FORWARD_BATCH_MAX: usize = 256;
const FORWARD_RETRY_MS: u64 = 100;

pub(crate) async fn forward_loop(shard: Rc<Shard>) {
    loop {
        let batch: Vec<_> = shard
            .core
            .borrow()
            .state
            .forwards
            .iter()
            .take(FORWARD_BATCH_MAX)
            .cloned()
            .collect();
        let Some(last) = batch.last().map(|f| f.lsn) else {
            shard.forward_signal.wait().await;
            continue;
        };
        let mut calls = Vec::new();
        for f in batch {
            let mut by_shard: BTreeMap<u32, Vec<GuestKvWrite>> = BTreeMap::new();
            for w in f.writes {
                by_shard
                    .entry(shard.partitioning.shard_of(&f.namespace, &w.key))
                    .or_default()
                    .push(w);
            }
            for (target, writes) in by_shard {
                let op = ShardOp::RemoteWrites {
                    origin_shard: shard.id,
                    origin_lsn: f.lsn,
                    namespace: f.namespace.clone(),
                    writes,
                };
                calls.push(shard.begin_shard_call(target, op));
            }
        }
        let mut ok = true;
        for call in calls {
            ok &= call.finish(&shard).await.is_ok();
        }
        if !ok {
            glommio::timer::sleep(Duration::from_millis(FORWARD_RETRY_MS)).await;
            continue;
        }
        let lsn = shard.commit(Record::KvForwarded { up_to_lsn: last });
        shard.wait_durable(lsn).await;
    }
}
