//! The keys that name things across the engine.

/// (namespace, run id): an action run or a workflow run.
pub type RunKey = (String, String);
/// The answer to a start naming a run id that exists and is not its repeat.
pub fn run_id_taken(run_id: &str, workflow: &str, status: &str) -> flo_protocol::ErrorValue {
    flo_protocol::ErrorValue::conflict(format!(
        "workflow run {run_id:?} exists already (workflow {workflow:?}, {status}); choose \
         another run id, or start with its idempotency key to get that run back"
    ))
}

/// (namespace, worker id).
pub type WorkerKey = (String, String);

/// The first id `{prefix}{n}` (`prefix` the concatenation of its parts) after counter
/// `last` that `ok` accepts (an id this shard owns and no run has), built in one buffer.
/// Counters never wrap: past `u64::MAX` (where an older version let a caller's
/// `wfrun-18446744073709551615` push one) ids go on with a second number.
pub fn fresh_run_id(last: u64, prefix: &[&str], ok: impl Fn(&str) -> bool) -> String {
    use std::fmt::Write;
    let mut id = String::with_capacity(prefix.iter().map(|p| p.len()).sum::<usize>() + 24);
    prefix.iter().for_each(|p| id.push_str(p));
    let base = id.len();
    let mut n = last;
    while let Some(next) = n.checked_add(1) {
        n = next;
        id.truncate(base);
        let _ = write!(id, "{n}");
        if ok(&id) {
            return id;
        }
    }
    id.truncate(base);
    let _ = write!(id, "{}.", u64::MAX);
    let base = id.len();
    let mut k = 0u64;
    loop {
        k = k.wrapping_add(1);
        id.truncate(base);
        let _ = write!(id, "{k}");
        if ok(&id) {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_skip_what_is_taken_and_never_wrap() {
        let make = &["wf", "run-"];
        assert_eq!(fresh_run_id(0, make, |_| true), "wfrun-1");
        assert_eq!(fresh_run_id(4, make, |id| id != "wfrun-5"), "wfrun-6");
        let last = fresh_run_id(u64::MAX - 1, make, |_| true);
        assert_eq!(last, format!("wfrun-{}", u64::MAX));
        let after = fresh_run_id(u64::MAX, make, |id| !id.ends_with(".1"));
        assert_eq!(after, format!("wfrun-{}.2", u64::MAX));
    }
}
