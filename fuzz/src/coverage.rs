//! Edge coverage on the stable toolchain, from LLVM's SanitizerCoverage. Built with
//!
//! ```text
//! RUSTFLAGS="-C passes=sancov-module -C llvm-args=-sanitizer-coverage-level=3
//!            -C llvm-args=-sanitizer-coverage-inline-8bit-counters"
//! ```
//!
//! (`scripts/fuzz.sh` does), every edge of the instrumented code increments its own byte
//! counter, and at start-up each module's constructor calls
//! `__sanitizer_cov_8bit_counters_init(start, stop)` with where the counters are (the
//! binary defines that function and hands the range to `register`). After each input the
//! driver folds the counters into AFL-style hit-count buckets: an input that reaches a new
//! (edge, bucket) pair is kept. Without those flags nothing registers, `Coverage::active`
//! is false, and the driver falls back to the targets' own fingerprints.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Distinct counter ranges kept (LLVM passes the same section to every module's
/// constructor: one range in practice).
const REGIONS_MAX: usize = 8;

static REGION_START: [AtomicPtr<u8>; REGIONS_MAX] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; REGIONS_MAX];
static REGION_LEN: [AtomicUsize; REGIONS_MAX] = [const { AtomicUsize::new(0) }; REGIONS_MAX];
static REGIONS: AtomicUsize = AtomicUsize::new(0);

/// Records a range of counters (from `__sanitizer_cov_8bit_counters_init`; runs before
/// `main`, once per instrumented module). Ranges already known are ignored.
pub fn register(start: *mut u8, stop: *mut u8) {
    let len = (stop as usize).saturating_sub(start as usize);
    if start.is_null() || len == 0 {
        return;
    }
    let known = REGIONS.load(Ordering::Acquire);
    if REGION_START[..known]
        .iter()
        .any(|r| r.load(Ordering::Relaxed) == start)
    {
        return;
    }
    if known == REGIONS_MAX {
        return;
    }
    REGION_START[known].store(start, Ordering::Relaxed);
    REGION_LEN[known].store(len, Ordering::Relaxed);
    REGIONS.store(known + 1, Ordering::Release);
}

/// The AFL hit-count buckets: 1, 2, 3, 4-7, 8-15, 16-31, 32-127, 128-255.
const fn bucket(hits: u8) -> u8 {
    match hits {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => 4,
        4..=7 => 8,
        8..=15 => 16,
        16..=31 => 32,
        32..=127 => 64,
        _ => 128,
    }
}

const BUCKETS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = bucket(i as u8);
        i += 1;
    }
    table
};

/// What a campaign has seen: per counter, the buckets reached so far.
pub struct Coverage {
    regions: Vec<(*mut u8, usize)>,
    seen: Vec<Vec<u8>>,
    edges: usize,
}

impl Coverage {
    pub fn new() -> Coverage {
        let n = REGIONS.load(Ordering::Acquire);
        let regions: Vec<(*mut u8, usize)> = (0..n)
            .map(|i| {
                (
                    REGION_START[i].load(Ordering::Relaxed),
                    REGION_LEN[i].load(Ordering::Relaxed),
                )
            })
            .collect();
        let seen = regions.iter().map(|&(_, len)| vec![0u8; len]).collect();
        Coverage {
            regions,
            seen,
            edges: 0,
        }
    }

    /// Whether this build counts edges.
    pub fn active(&self) -> bool {
        !self.regions.is_empty()
    }

    /// Counters in the build.
    pub fn counters(&self) -> usize {
        self.regions.iter().map(|r| r.1).sum()
    }

    /// Edges reached so far.
    pub fn edges(&self) -> usize {
        self.edges
    }

    /// Zeroes the counters: call right before running an input.
    pub fn reset(&self) {
        for &(start, len) in &self.regions {
            // SAFETY: (start, len) is the counter section LLVM registered; it lives as long
            // as the program and holds plain bytes. Instrumented code on other threads may
            // bump a counter meanwhile: a lost count only blurs the signal.
            unsafe { std::ptr::write_bytes(start, 0, len) };
        }
    }

    /// Folds the counters of the input just run into what was seen; true when it reached
    /// an (edge, bucket) pair never reached before.
    pub fn absorb(&mut self) -> bool {
        let mut new = false;
        for (r, &(start, len)) in self.regions.iter().enumerate() {
            let seen = &mut self.seen[r];
            for_each_hit(start, len, |i, hits| {
                let b = BUCKETS[hits as usize];
                if seen[i] & b == 0 {
                    if seen[i] == 0 {
                        self.edges += 1;
                    }
                    seen[i] |= b;
                    new = true;
                }
            });
        }
        new
    }

    /// The edges the input just run reached, as numbers (for corpus minimisation).
    pub fn edges_hit(&self, out: &mut Vec<u64>) {
        out.clear();
        let mut base = 0u64;
        for &(start, len) in &self.regions {
            for_each_hit(start, len, |i, _| out.push(base + i as u64));
            base += len as u64;
        }
    }
}

impl Default for Coverage {
    fn default() -> Coverage {
        Coverage::new()
    }
}

/// Calls `f(index, hits)` for every non-zero counter, reading eight at a time.
fn for_each_hit(start: *mut u8, len: usize, mut f: impl FnMut(usize, u8)) {
    let words = len / 8;
    for w in 0..words {
        // SAFETY: inside the registered counter section (see `reset`).
        let word = unsafe { std::ptr::read_volatile(start.add(w * 8) as *const [u8; 8]) };
        if u64::from_ne_bytes(word) == 0 {
            continue;
        }
        for (j, &hits) in word.iter().enumerate() {
            if hits != 0 {
                f(w * 8 + j, hits);
            }
        }
    }
    for i in words * 8..len {
        // SAFETY: as above.
        let hits = unsafe { std::ptr::read_volatile(start.add(i)) };
        if hits != 0 {
            f(i, hits);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_afl() {
        assert_eq!(
            [1, 2, 3, 4, 7, 8, 16, 32, 127, 128, 255].map(bucket),
            [1, 2, 4, 8, 8, 16, 32, 64, 64, 128, 128]
        );
    }

    #[test]
    fn hits_are_found_in_words_and_in_the_tail() {
        let mut counters = [0u8; 19];
        counters[0] = 1;
        counters[9] = 3;
        counters[18] = 200;
        let mut hits = Vec::new();
        for_each_hit(counters.as_mut_ptr(), counters.len(), |i, h| {
            hits.push((i, h))
        });
        assert_eq!(hits, [(0, 1), (9, 3), (18, 200)]);
    }
}
