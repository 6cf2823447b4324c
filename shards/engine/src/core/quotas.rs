//! The namespaces' quotas (auth file `quotas:`), checked before a request adds what they
//! bound. Each shard enforces its share of a quota: the quota divided by the shards,
//! rounded up (keys and run ids hash evenly over the shards).

use super::commit::Core;
use flo_protocol::{ErrorCode, ErrorValue};

/// `total` split over `shards`, rounded up.
fn share(total: u64, shards: u32) -> u64 {
    total.div_ceil(u64::from(shards.max(1)))
}

fn over(namespace: &str, what: &str, quota: u64, shards: u32) -> ErrorValue {
    ErrorValue::new(
        ErrorCode::Overloaded,
        format!(
            "namespace {namespace:?} is at its {what} quota ({quota} over the server, \
             {} on this shard); wait for runs to finish or free some, or raise it in the \
             auth file",
            share(quota, shards)
        ),
    )
}

impl Core {
    /// Refuses a new run of `namespace` when its runs in flight on this shard reached its
    /// share of `live_runs`.
    pub fn check_live_runs(&self, namespace: &str) -> Result<(), ErrorValue> {
        let Some(quota) = self.quota(namespace).and_then(|q| q.live_runs) else {
            return Ok(());
        };
        let shards = self.partitioning().shards;
        let state = self.state();
        let live = state.runs.len_in(namespace) + state.workflows.run_count_in(namespace);
        if live as u64 >= share(quota, shards) {
            return Err(over(namespace, "live_runs", quota, shards));
        }
        Ok(())
    }

    /// Refuses a put of `value_len` bytes at `key` that would take `namespace`'s KV data on
    /// this shard beyond its share of `kv_bytes` (looked up only when a quota applies).
    pub fn check_kv_bytes(
        &self,
        namespace: &str,
        key: &str,
        value_len: usize,
    ) -> Result<(), ErrorValue> {
        let Some(quota) = self.quota(namespace).and_then(|q| q.kv_bytes) else {
            return Ok(());
        };
        let shards = self.partitioning().shards;
        let kv = &self.state().kv;
        let held = kv.bytes_in(namespace);
        let adding = kv.bytes_added(namespace, key, value_len);
        if held.saturating_add(adding) > share(quota, shards) {
            return Err(over(namespace, "kv_bytes", quota, shards));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_quota_is_shared_over_the_shards_rounded_up() {
        assert_eq!(super::share(10, 4), 3);
        assert_eq!(super::share(8, 4), 2);
        assert_eq!(super::share(1, 4), 1);
        assert_eq!(super::share(5, 0), 5);
    }
}
