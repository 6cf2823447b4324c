//! Workloads: each produces the operation for a global operation number and judges replies.
//! To add one: a variant of [`Workload`], a [`Generator`], and a line in `main::run_workload`.

use clap::ValueEnum;
use flo::protocol::{Op, Reply};
use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// KV puts of fixed-size values over `--keys` keys (`k-0`, `k-1`, ...).
    KvPut,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::KvPut => "kv-put",
        }
    }
}

/// Produces a connection's operations. One per connection thread.
pub trait Generator: Send {
    /// Writes the operation numbered `n` (0-based, global across connections) into `op`.
    /// `op` holds this generator's previous operation (or a placeholder the first time), so
    /// a generator may update it in place instead of allocating a new one.
    fn fill(&mut self, n: u64, op: &mut Op);

    /// Whether a successful reply is the one expected; `Err` counts as an error.
    fn check(&self, reply: &Reply) -> Result<(), String>;
}

/// `kv-put`: `KvPut { key: "k-{n % keys}", value: <value_bytes bytes> }`.
pub struct KvPut {
    namespace: String,
    keys: u64,
    value: Vec<u8>,
}

impl KvPut {
    pub fn new(namespace: &str, keys: u64, value_bytes: usize) -> Self {
        let value = (0..value_bytes).map(|i| b'a' + (i % 26) as u8).collect();
        KvPut {
            namespace: namespace.to_string(),
            keys: keys.max(1),
            value,
        }
    }
}

impl Generator for KvPut {
    fn fill(&mut self, n: u64, op: &mut Op) {
        if !matches!(op, Op::KvPut { .. }) {
            *op = Op::KvPut {
                namespace: self.namespace.clone(),
                key: String::with_capacity(24),
                value: self.value.clone(),
                ttl_ms: None,
                if_version: None,
            };
        }
        if let Op::KvPut { key, .. } = op {
            key.clear();
            let _ = write!(key, "k-{}", n % self.keys);
        }
    }

    fn check(&self, reply: &Reply) -> Result<(), String> {
        match reply {
            Reply::KvPut { .. } => Ok(()),
            other => Err(format!("unexpected reply to a KV put: {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_put_cycles_keys_and_reuses_the_op() {
        let mut generator = KvPut::new("ns", 3, 5);
        let mut op = Op::Status;
        generator.fill(4, &mut op);
        let expected = Op::KvPut {
            namespace: "ns".into(),
            key: "k-1".into(),
            value: b"abcde".to_vec(),
            ttl_ms: None,
            if_version: None,
        };
        assert_eq!(op, expected);
        generator.fill(5, &mut op);
        let Op::KvPut { key, .. } = &op else {
            panic!("not a put: {op:?}")
        };
        assert_eq!(key, "k-2");
    }
}
