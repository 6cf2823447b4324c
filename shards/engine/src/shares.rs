//! Per-namespace shares of a shard's pools (parked reads): no namespace may hold more than
//! a share of a pool, so one tenant filling it cannot refuse another's requests.

use crate::tables::HashMap;

/// A namespace holds at most 1 / this of a pool.
pub const NAMESPACE_SHARE_DIVISOR: usize = 4;

/// The most of a pool of `pool_max` one namespace may hold.
pub const fn share_of(pool_max: usize) -> usize {
    let share = pool_max / NAMESPACE_SHARE_DIVISOR;
    if share == 0 { 1 } else { share }
}

/// What each namespace holds of one pool.
#[derive(Debug, Default)]
pub struct Shares {
    held: HashMap<String, usize>,
}

impl Shares {
    pub fn held(&self, namespace: &str) -> usize {
        self.held.get(namespace).copied().unwrap_or(0)
    }

    pub fn take(&mut self, namespace: &str) {
        match self.held.get_mut(namespace) {
            Some(n) => *n += 1,
            None => {
                self.held.insert(namespace.to_string(), 1);
            }
        }
    }

    pub fn give_back(&mut self, namespace: &str) {
        if let Some(n) = self.held.get_mut(namespace) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(namespace);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_count_per_namespace_and_forget_what_is_given_back() {
        let mut s = Shares::default();
        s.take("a");
        s.take("a");
        s.take("b");
        assert_eq!((s.held("a"), s.held("b"), s.held("c")), (2, 1, 0));
        s.give_back("a");
        s.give_back("a");
        s.give_back("c");
        assert_eq!(s.held("a"), 0);
        assert!(!s.held.contains_key("a"));
        assert_eq!(share_of(4096), 1024);
        assert_eq!(share_of(2), 1);
    }
}
