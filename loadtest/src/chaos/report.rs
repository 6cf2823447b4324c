//! Violations (printed as they are found, one line each) and the campaign's figures.

use crate::args::Args;
use crate::model::Counts;
use std::sync::Mutex;
use std::time::Duration;

/// Shared by the main thread, the load threads and the workers.
pub struct Report {
    seed: u64,
    args: Args,
    violations: Mutex<Vec<String>>,
    counts: Mutex<Counts>,
}

impl Report {
    pub fn new(seed: u64, args: Args) -> Report {
        Report {
            seed,
            args,
            violations: Mutex::new(Vec::new()),
            counts: Mutex::new(Counts::default()),
        }
    }

    /// Prints `violation: cycle C seed S: WHAT; replay: COMMAND` on stdout, then `detail`
    /// (a server's stderr) indented below it.
    pub fn violation(&self, cycle: u64, what: &str, detail: Option<&str>) {
        let line = format!(
            "violation: cycle {cycle} seed {}: {what}; replay: {}",
            self.seed,
            self.args.replay(self.seed, cycle)
        );
        let mut violations = self.violations.lock().unwrap();
        println!("{line}");
        for detail_line in detail.unwrap_or_default().lines() {
            println!("    {detail_line}");
        }
        violations.push(line);
    }

    pub fn violations(&self) -> usize {
        self.violations.lock().unwrap().len()
    }

    pub fn add_counts(&self, counts: &Counts) {
        self.counts.lock().unwrap().merge(counts);
    }

    pub fn counts(&self) -> Counts {
        self.counts.lock().unwrap().clone()
    }
}

/// What verification looked at, over the campaign.
#[derive(Debug, Default)]
pub struct Verified {
    pub kv_keys: u64,
    pub runs_final: u64,
    pub histories: u64,
    pub guest_writes: u64,
    pub task_results: u64,
    pub old_runs: u64,
    /// In-doubt creations the repeat after the restart found created.
    pub in_doubt_found: u64,
}

/// The campaign's figures for the summary.
#[derive(Debug, Default)]
pub struct Campaign {
    pub cycles: u64,
    pub restarts: u64,
    pub restart_total: Duration,
    pub restart_slowest: Duration,
    pub slowest_cycle: u64,
    /// Restarted servers killed again before verification.
    pub quick_kills: u64,
    pub verified: Verified,
}

impl Campaign {
    pub fn restarted(&mut self, cycle: u64, took: Duration) {
        self.restarts += 1;
        self.restart_total += took;
        if took > self.restart_slowest {
            self.restart_slowest = took;
            self.slowest_cycle = cycle;
        }
    }
}

/// The summary printed at the end.
pub fn summary(
    seed: u64,
    campaign: &Campaign,
    counts: &Counts,
    violations: usize,
    took: Duration,
) -> String {
    let mean = campaign
        .restart_total
        .checked_div(campaign.restarts.max(1) as u32)
        .unwrap_or_default();
    let list = |map: &std::collections::BTreeMap<&'static str, u64>| {
        let parts: Vec<String> = map.iter().map(|(k, n)| format!("{k} {n}")).collect();
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join(", ")
        }
    };
    let v = &campaign.verified;
    format!(
        "flo-chaos: seed {seed}: {} cycles in {:.1} s, {} restarts ({} of them after a kill right \
         after a restart; slowest {:.2} s at cycle {}, mean {:.2} s)\n\
         acknowledged: {} ({})\n\
         in doubt at the kills: {} ({})\n\
         verified: {} KV key reads, {} runs final, {} histories, {} guest writes, {} task \
         results, {} earlier runs sampled, {} in-doubt creations found applied\n\
         violations: {violations}\n",
        campaign.cycles,
        took.as_secs_f64(),
        campaign.restarts,
        campaign.quick_kills,
        campaign.restart_slowest.as_secs_f64(),
        campaign.slowest_cycle,
        mean.as_secs_f64(),
        counts.acked_total(),
        list(&counts.acked),
        counts.in_doubt_total(),
        list(&counts.in_doubt),
        v.kv_keys,
        v.runs_final,
        v.histories,
        v.guest_writes,
        v.task_results,
        v.old_runs,
        v.in_doubt_found,
    )
}
