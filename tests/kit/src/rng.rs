//! A small seeded PRNG (SplitMix64): every random choice of a test, a simulation or a
//! campaign comes from one seed, so a seed a failure printed replays it.
//!
//! The engine's simulation and `flo-chaos` print seeds to replay: the stream of a seed and
//! the meaning of `below`, `one_in` and `pick` must not change, or the seeds published in
//! `docs/` stop replaying (`a_seed_gives_the_stream_it_always_gave` pins them).

/// SplitMix64's increment (the golden ratio in 64 bits).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The stream of `seed` for one purpose: `(seed, a, b)` and `(seed, b, a)` differ.
    pub fn derive(seed: u64, a: u64, b: u64) -> Rng {
        let x = Rng(seed).next_u64() ^ a.wrapping_mul(GAMMA);
        Rng(Rng(x).next_u64() ^ b.wrapping_mul(0xc2b2_ae3d_27d4_eb4f))
    }

    /// Seeded from the clock and the process, for data that only needs to differ per run.
    pub fn from_time() -> Rng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng::derive(nanos, u64::from(std::process::id()), 0)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`; `below(0)` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// `below` for an index or a length: uniform in `0..n`.
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi, "between({lo}, {hi})");
        lo + self.below(hi - lo + 1)
    }

    /// True `percent` times in a hundred.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }

    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_stream_it_always_gave() {
        // SplitMix64's published first outputs for seed 0 and 1234567.
        let mut zero = Rng::new(0);
        assert_eq!(zero.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(zero.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        let mut r = Rng::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
        // `below` is the remainder: what the simulation's and flo-chaos's seeds relied on.
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        assert_eq!(a.below(1000), b.next_u64() % 1000);
    }

    #[test]
    fn the_same_seed_gives_the_same_stream_and_purposes_differ() {
        let a: Vec<u64> = (0..4).map(|_| Rng::derive(7, 1, 2).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(
            Rng::derive(7, 1, 2).next_u64(),
            Rng::derive(7, 2, 1).next_u64()
        );
        assert_ne!(Rng::new(7).next_u64(), Rng::new(8).next_u64());
    }

    #[test]
    fn ranges_stay_in_range_and_reach_both_ends() {
        let mut r = Rng::new(1);
        let xs: Vec<u64> = (0..1000).map(|_| r.between(3, 5)).collect();
        assert!(xs.iter().all(|x| (3..=5).contains(x)));
        assert!(xs.contains(&3) && xs.contains(&5));
        let xs: Vec<usize> = (0..1000).map(|_| r.index(5)).collect();
        assert!(xs.iter().all(|&x| x < 5));
        assert!(xs.contains(&0) && xs.contains(&4));
        assert_eq!(r.below(0), 0);
    }
}
