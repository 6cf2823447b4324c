//! The in-memory state of inline plans on this shard: per executor a circuit breaker, a
//! health score and rate-limit windows; per plan a round-robin turn and a result cache.
//! None of it is logged and all of it starts afresh after a restart (the reference's
//! behaviour: a restarted server gives every executor a fresh chance). What a step decides
//! from it — the order of executors, a skip, a cache hit — is logged as a `WfPlanEvent`,
//! so replay never decides again.

use crate::tables::HashMap;
use flo_workflow::{Breaker, HealthPolicy, Plan, RateLimit};
use std::collections::VecDeque;

/// Cache entries a shard keeps at most (the oldest inserted go first).
pub const PLAN_CACHE_ENTRIES_MAX: usize = 10_000;
/// Largest output cached.
pub const PLAN_CACHE_VALUE_BYTES_MAX: usize = 64 << 10;
/// Bytes of cached outputs and keys a shard keeps at most (the oldest inserted go first).
pub const PLAN_CACHE_BYTES_MAX: usize = 16 << 20;

/// A plan: namespace, `workflow:version`, plan name. Each version's plan has its own
/// state (a new version may reorder or rename its executors).
pub type PlanKey = (String, String, String);

pub fn plan_key(namespace: &str, workflow: &str, version: &str, plan: &str) -> PlanKey {
    (
        namespace.to_string(),
        format!("{workflow}:{version}"),
        plan.to_string(),
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open {
        until_ms: u64,
    },
    /// After the cooldown: `started` probes let through so far.
    HalfOpen {
        started: u32,
    },
}

impl BreakerState {
    pub fn as_str(&self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open { .. } => "open",
            BreakerState::HalfOpen { .. } => "half_open",
        }
    }
}

/// One executor's state on this shard.
#[derive(Debug, Clone)]
pub struct ExecutorState {
    pub breaker: BreakerState,
    pub consecutive_failures: u32,
    /// Decayed weights of attempts, of API successes and of business successes.
    pub weight: f64,
    pub api_ok: f64,
    pub business_ok: f64,
    /// Attempts that ended, ever (on this shard since the start).
    pub samples: u64,
    last_sample_ms: u64,
    /// (window start, attempts started) per second, minute, hour.
    windows: [(u64, u32); 3],
}

impl Default for ExecutorState {
    fn default() -> Self {
        ExecutorState {
            breaker: BreakerState::Closed,
            consecutive_failures: 0,
            weight: 0.0,
            api_ok: 0.0,
            business_ok: 0.0,
            samples: 0,
            last_sample_ms: 0,
            windows: [(0, 0); 3],
        }
    }
}

const WINDOW_MS: [u64; 3] = [1_000, 60_000, 3_600_000];

/// How an attempt on an executor ended, as health and breakers count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptEnd {
    /// Completed.
    Success,
    /// Failed with a fatal error code: the executor answered (an API success), the
    /// business result is a failure (a declined card); the breaker does not count it.
    BusinessFailure,
    /// Failed otherwise (an error, a timeout).
    Failure,
}

impl ExecutorState {
    /// The breaker as of `now_ms` (an open one past its cooldown is half-open).
    fn breaker_at(&mut self, breaker: Option<&Breaker>, now_ms: u64) -> BreakerState {
        if breaker.is_none() {
            self.breaker = BreakerState::Closed;
        }
        if let BreakerState::Open { until_ms } = self.breaker
            && now_ms >= until_ms
        {
            self.breaker = BreakerState::HalfOpen { started: 0 };
        }
        self.breaker
    }

    /// Whether `admit` would let an attempt start now (counts nothing).
    pub fn would_admit(&mut self, breaker: Option<&Breaker>, now_ms: u64) -> bool {
        match (self.breaker_at(breaker, now_ms), breaker) {
            (BreakerState::Closed, _) | (_, None) => true,
            (BreakerState::Open { .. }, _) => false,
            (BreakerState::HalfOpen { started }, Some(b)) => started < b.half_open_max_calls,
        }
    }

    /// Whether an attempt may start now: false while open, or half-open with every probe
    /// out. Counts a probe when half-open.
    pub fn admit(&mut self, breaker: Option<&Breaker>, now_ms: u64) -> bool {
        match (self.breaker_at(breaker, now_ms), breaker) {
            (BreakerState::Closed, _) | (_, None) => true,
            (BreakerState::Open { .. }, _) => false,
            (BreakerState::HalfOpen { started }, Some(b)) => {
                if started >= b.half_open_max_calls {
                    return false;
                }
                self.breaker = BreakerState::HalfOpen {
                    started: started + 1,
                };
                true
            }
        }
    }

    /// Whether an attempt would go over the rate limit; else counts it.
    pub fn take_rate(&mut self, limit: Option<&RateLimit>, share: RateShare, now_ms: u64) -> bool {
        let Some(limit) = limit else {
            return true;
        };
        let caps = [limit.per_second, limit.per_minute, limit.per_hour];
        for (i, cap) in caps.iter().enumerate() {
            let Some(cap) = cap else { continue };
            let start = now_ms - now_ms % WINDOW_MS[i];
            if self.windows[i].0 != start {
                self.windows[i] = (start, 0);
            }
            if self.windows[i].1 >= share.of(*cap) {
                return false;
            }
        }
        for (i, cap) in caps.iter().enumerate() {
            if cap.is_some() {
                self.windows[i].1 += 1;
            }
        }
        true
    }

    /// Attempts started in the current window of each limit: (per second, minute, hour).
    pub fn rate_used(&self, now_ms: u64) -> [u32; 3] {
        let mut out = [0; 3];
        for (i, (start, n)) in self.windows.iter().enumerate() {
            if *start == now_ms - now_ms % WINDOW_MS[i] {
                out[i] = *n;
            }
        }
        out
    }

    /// An attempt ended.
    pub fn record(
        &mut self,
        end: AttemptEnd,
        breaker: Option<&Breaker>,
        health: Option<&HealthPolicy>,
        now_ms: u64,
    ) {
        let (window_ms, decay) = health.map_or((300_000, 0.9), |h| (h.window_ms, h.decay()));
        if self.samples > 0 && now_ms > self.last_sample_ms {
            let age = (now_ms - self.last_sample_ms) as f64 / window_ms.max(1) as f64;
            let factor = decay.powf(age);
            self.weight *= factor;
            self.api_ok *= factor;
            self.business_ok *= factor;
        }
        self.last_sample_ms = now_ms;
        self.samples += 1;
        self.weight += 1.0;
        if end != AttemptEnd::Failure {
            self.api_ok += 1.0;
        }
        if end == AttemptEnd::Success {
            self.business_ok += 1.0;
        }
        let state = self.breaker_at(breaker, now_ms);
        match end {
            AttemptEnd::Success | AttemptEnd::BusinessFailure => {
                self.consecutive_failures = 0;
                if matches!(state, BreakerState::HalfOpen { .. }) {
                    self.breaker = BreakerState::Closed;
                }
            }
            AttemptEnd::Failure => {
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                let Some(b) = breaker else { return };
                let opens = match state {
                    BreakerState::HalfOpen { .. } => true,
                    BreakerState::Closed => self.consecutive_failures >= b.failure_threshold,
                    BreakerState::Open { .. } => false,
                };
                if opens {
                    self.breaker = BreakerState::Open {
                        until_ms: now_ms.saturating_add(b.cooldown_ms),
                    };
                }
            }
        }
    }

    /// 0.7 × API success rate + 0.3 × business success rate, ×0.1 with the breaker open
    /// and ×0.5 half-open; 1.0 before any sample.
    pub fn score(&self) -> f64 {
        let base = if self.weight <= 0.0 {
            1.0
        } else {
            0.7 * (self.api_ok / self.weight) + 0.3 * (self.business_ok / self.weight)
        };
        match self.breaker {
            BreakerState::Closed => base,
            BreakerState::Open { .. } => base * 0.1,
            BreakerState::HalfOpen { .. } => base * 0.5,
        }
    }
}

/// This shard's part of a rate limit: the limit split over the shards (the sum never
/// exceeds it; a shard whose part is 0 skips the executor).
#[derive(Debug, Clone, Copy)]
pub struct RateShare {
    pub shard: u32,
    pub shards: u32,
}

impl RateShare {
    pub fn of(self, cap: u32) -> u32 {
        let shards = self.shards.max(1);
        cap / shards + u32::from(self.shard < cap % shards)
    }
}

struct CacheEntry {
    output: Vec<u8>,
    outcome: Option<String>,
    expires_at_ms: u64,
    invalidate_on: Vec<String>,
}

/// A cached step output: the output bytes and the outcome named.
pub type CachedOutput = (Vec<u8>, Option<String>);

#[derive(Default)]
pub struct PlanBook {
    executors: HashMap<PlanKey, Vec<ExecutorState>>,
    turns: HashMap<PlanKey, u64>,
    cache: HashMap<(PlanKey, String), CacheEntry>,
    cache_order: VecDeque<(PlanKey, String)>,
    /// What `cache` holds, as `entry_bytes` counts it.
    cache_bytes: usize,
}

/// What a cache entry costs, roughly: its output, its keys and their bookkeeping.
fn entry_bytes(k: &(PlanKey, String), e: &CacheEntry) -> usize {
    let ((ns, wf, plan), key) = k;
    e.output.len() + ns.len() + wf.len() + plan.len() + key.len() + 128
}

impl PlanBook {
    /// The plan's executors' states (created as `plan` has executors).
    pub fn executors(&mut self, key: &PlanKey, plan: &Plan) -> &mut Vec<ExecutorState> {
        let states = self.executors.entry(key.clone()).or_default();
        states.resize_with(plan.executors.len(), ExecutorState::default);
        states
    }

    pub fn executors_seen(&self, key: &PlanKey) -> Option<&Vec<ExecutorState>> {
        self.executors.get(key)
    }

    /// The order a new step tries the executors in (indexes into `plan.executors`).
    pub fn order(&mut self, key: &PlanKey, plan: &Plan, seed: u64) -> Vec<u16> {
        let mut by_priority: Vec<u16> = (0..plan.executors.len() as u16).collect();
        // Highest priority first; as written among equals.
        by_priority.sort_by_key(|&i| std::cmp::Reverse(plan.executors[i as usize].priority));
        match plan.selection {
            flo_workflow::Selection::StaticOrder => by_priority,
            flo_workflow::Selection::RoundRobin => {
                let turn = self.turns.entry(key.clone()).or_default();
                let n = by_priority.len().max(1);
                by_priority.rotate_left((*turn % n as u64) as usize);
                *turn = turn.wrapping_add(1);
                by_priority
            }
            flo_workflow::Selection::Random => {
                // A shuffle from the seed (the order is logged, so it need not be replayed).
                let mut state = seed | 1;
                let mut out = by_priority;
                for i in (1..out.len()).rev() {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    out.swap(i, (state % (i as u64 + 1)) as usize);
                }
                out
            }
            flo_workflow::Selection::HealthWeighted => {
                let min = plan.health.map_or(1, |h| h.min_samples) as u64;
                let states = self.executors(key, plan);
                if states.iter().any(|s| s.samples < min) {
                    return by_priority;
                }
                let scores: Vec<f64> = states.iter().map(ExecutorState::score).collect();
                let mut out = by_priority;
                // Stable: equal scores keep priority order.
                out.sort_by(|a, b| scores[*b as usize].total_cmp(&scores[*a as usize]));
                out
            }
        }
    }

    /// A cached output for `cache_key`, unless expired.
    pub fn cached(&self, key: &PlanKey, cache_key: &str, now_ms: u64) -> Option<CachedOutput> {
        let entry = self.cache.get(&(key.clone(), cache_key.to_string()))?;
        (entry.expires_at_ms > now_ms).then(|| (entry.output.clone(), entry.outcome.clone()))
    }

    pub fn cache_put(
        &mut self,
        key: &PlanKey,
        cache_key: String,
        value: CachedOutput,
        policy: &flo_workflow::CachePolicy,
        now_ms: u64,
    ) {
        if value.0.len() > PLAN_CACHE_VALUE_BYTES_MAX {
            return;
        }
        let k = (key.clone(), cache_key);
        let entry = CacheEntry {
            output: value.0,
            outcome: value.1,
            expires_at_ms: now_ms.saturating_add(policy.ttl_ms),
            invalidate_on: policy.invalidate_on.clone(),
        };
        self.cache_bytes += entry_bytes(&k, &entry);
        match self.cache.insert(k.clone(), entry) {
            Some(old) => self.cache_bytes -= entry_bytes(&k, &old),
            None => self.cache_order.push_back(k),
        }
        while self.cache.len() > PLAN_CACHE_ENTRIES_MAX || self.cache_bytes > PLAN_CACHE_BYTES_MAX {
            let Some(old) = self.cache_order.pop_front() else {
                break;
            };
            if let Some(e) = self.cache.remove(&old) {
                self.cache_bytes -= entry_bytes(&old, &e);
            }
        }
    }

    /// Drops the cached outputs of `namespace`'s plans whose `invalidate_on` names
    /// `event` (of the key `only`, when given); returns how many.
    pub fn invalidate(&mut self, namespace: &str, event: &str, only: Option<&str>) -> u64 {
        let before = self.cache.len();
        let mut freed = 0;
        self.cache.retain(|k, e| {
            let drop = k.0.0 == namespace
                && e.invalidate_on.iter().any(|ev| ev == event)
                && only.is_none_or(|o| o == k.1);
            if drop {
                freed += entry_bytes(k, e);
            }
            !drop
        });
        self.cache_bytes -= freed;
        let cache = &self.cache;
        self.cache_order.retain(|k| cache.contains_key(k));
        (before - self.cache.len()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> Breaker {
        Breaker {
            failure_threshold: 3,
            cooldown_ms: 1000,
            half_open_max_calls: 1,
        }
    }

    #[test]
    fn a_breaker_opens_half_opens_and_closes_or_reopens_by_its_probe() {
        let (mut s, b) = (ExecutorState::default(), breaker());
        for t in 0..3 {
            assert!(s.admit(Some(&b), t));
            s.record(AttemptEnd::Failure, Some(&b), None, t);
        }
        assert_eq!(s.breaker, BreakerState::Open { until_ms: 1002 });
        assert!(!s.admit(Some(&b), 1001));
        // Half-open: one probe, then no more until it ends.
        assert!(s.admit(Some(&b), 1002));
        assert!(!s.admit(Some(&b), 1003));
        s.record(AttemptEnd::Failure, Some(&b), None, 1004);
        assert_eq!(s.breaker, BreakerState::Open { until_ms: 2004 });
        assert!(s.admit(Some(&b), 2004));
        s.record(AttemptEnd::Success, Some(&b), None, 2005);
        assert_eq!(s.breaker, BreakerState::Closed);
        // A business failure (fatal code) never opens it.
        for t in 0..10 {
            s.record(AttemptEnd::BusinessFailure, Some(&b), None, 3000 + t);
        }
        assert_eq!(s.breaker, BreakerState::Closed);
    }

    #[test]
    fn scores_weigh_api_and_business_success_and_breaker_penalties() {
        let mut s = ExecutorState::default();
        assert_eq!(s.score(), 1.0);
        s.record(AttemptEnd::Success, None, None, 1);
        s.record(AttemptEnd::BusinessFailure, None, None, 1);
        // api 2/2, business 1/2.
        assert!((s.score() - (0.7 + 0.15)).abs() < 1e-9, "{}", s.score());
        s.breaker = BreakerState::Open { until_ms: 10 };
        assert!((s.score() - 0.085).abs() < 1e-9);
    }

    fn plan(selection: &str, health: &str) -> Plan {
        let yaml = format!(
            "kind: Workflow\nname: w\nversion: \"1\"\nplans:\n  p:\n    selection: {selection}\n{health}    executors:\n      - {{name: low, action: \"@actions/a\", priority: 1}}\n      - {{name: high, action: \"@actions/b\", priority: 9}}\n      - {{name: mid, action: \"@actions/c\", priority: 5}}\nstart:\n  run: \"@plan/p\"\n  transitions: {{success: flo.Completed}}\n"
        );
        flo_workflow::parse_workflow(&yaml).unwrap().def.plans["p"].clone()
    }

    #[test]
    fn orders_follow_priority_rotation_shuffle_or_health() {
        let key = plan_key("ns", "w", "1", "p");
        let mut book = PlanBook::default();
        let p = plan("static-order", "");
        assert_eq!(book.order(&key, &p, 7), [1, 2, 0]);
        let p = plan("round-robin", "");
        let turns: Vec<Vec<u16>> = (0..4).map(|_| book.order(&key, &p, 0)).collect();
        assert_eq!(
            turns,
            [vec![1, 2, 0], vec![2, 0, 1], vec![0, 1, 2], vec![1, 2, 0]]
        );
        let p = plan("random", "");
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let mut order = book.order(&key, &p, seed);
            seen.insert(order.clone());
            order.sort();
            assert_eq!(order, [0, 1, 2], "a permutation");
        }
        assert!(seen.len() > 3, "{seen:?}");
        // Health-weighted: priority order until every executor has min_samples, then by
        // score (the high-priority one failing drops behind).
        let p = plan(
            "health-weighted",
            "    health: {window_ms: 1000, decay: 0.5, min_samples: 2}\n",
        );
        assert_eq!(book.order(&key, &p, 0), [1, 2, 0]);
        for t in 0..2 {
            let states = book.executors(&key, &p);
            states[0].record(AttemptEnd::Success, None, None, t);
            states[1].record(AttemptEnd::Failure, None, None, t);
            states[2].record(AttemptEnd::BusinessFailure, None, None, t);
        }
        assert_eq!(book.order(&key, &p, 0), [0, 2, 1]);
    }

    #[test]
    fn the_cache_expires_evicts_and_is_invalidated_by_event() {
        let key = plan_key("ns", "w", "1", "p");
        let policy = flo_workflow::CachePolicy {
            ttl_ms: 100,
            key: "k".into(),
            invalidate_on: vec!["refund".into()],
        };
        let mut book = PlanBook::default();
        book.cache_put(&key, "a".into(), (b"1".to_vec(), None), &policy, 0);
        book.cache_put(
            &key,
            "b".into(),
            (b"2".to_vec(), Some("ok".into())),
            &policy,
            0,
        );
        assert_eq!(book.cached(&key, "a", 99), Some((b"1".to_vec(), None)));
        assert_eq!(book.cached(&key, "a", 100), None, "expired");
        assert_eq!(book.invalidate("other-ns", "refund", None), 0);
        assert_eq!(book.invalidate("ns", "refund", Some("b")), 1);
        assert_eq!(book.cached(&key, "b", 1), None);
        assert_eq!(book.invalidate("ns", "refund", None), 1);
        for i in 0..PLAN_CACHE_ENTRIES_MAX + 5 {
            book.cache_put(&key, i.to_string(), (Vec::new(), None), &policy, 0);
        }
        assert_eq!(book.cached(&key, "0", 1), None, "the oldest went first");
        assert!(book.cached(&key, "5", 1).is_some());
        // Large outputs: the byte budget, not the count, bounds the cache.
        let big = vec![b'x'; PLAN_CACHE_VALUE_BYTES_MAX];
        for i in 0..400 {
            book.cache_put(&key, format!("big{i}"), (big.clone(), None), &policy, 0);
        }
        assert!(
            book.cache_bytes <= PLAN_CACHE_BYTES_MAX,
            "{}",
            book.cache_bytes
        );
        assert!(book.cached(&key, "big399", 1).is_some());
        assert_eq!(book.cached(&key, "big0", 1), None);
        assert!(book.invalidate("ns", "refund", None) > 0);
        assert_eq!(
            (book.cache.len(), book.cache_bytes),
            (0, 0),
            "every byte given back"
        );
    }

    #[test]
    fn rate_limits_split_over_shards_and_reset_per_window() {
        let share = |shard| RateShare { shard, shards: 2 };
        assert_eq!((share(0).of(3), share(1).of(3)), (2, 1));
        assert_eq!((share(0).of(1), share(1).of(1)), (1, 0));
        let limit = RateLimit {
            per_second: Some(2),
            per_minute: None,
            per_hour: None,
        };
        let mut s = ExecutorState::default();
        let one = RateShare {
            shard: 0,
            shards: 1,
        };
        assert!(s.take_rate(Some(&limit), one, 5_000));
        assert!(s.take_rate(Some(&limit), one, 5_500));
        assert!(!s.take_rate(Some(&limit), one, 5_999));
        assert_eq!(s.rate_used(5_999), [2, 0, 0]);
        assert!(s.take_rate(Some(&limit), one, 6_000));
    }
}
