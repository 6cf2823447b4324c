//! A small seeded PRNG (SplitMix64): every random choice of a campaign comes from one seed.

pub struct Rng(u64);

impl Rng {
    /// The stream of `seed` for one purpose: `(seed, a, b)` and `(seed, b, a)` differ.
    pub fn derive(seed: u64, a: u64, b: u64) -> Rng {
        let mut rng = Rng(seed);
        let x = rng.next_u64() ^ a.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut rng = Rng(x);
        Rng(rng.next_u64() ^ b.wrapping_mul(0xc2b2_ae3d_27d4_eb4f))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True `percent` times in a hundred.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_stream_and_purposes_differ() {
        let a: Vec<u64> = (0..4).map(|_| Rng::derive(7, 1, 2).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(
            Rng::derive(7, 1, 2).next_u64(),
            Rng::derive(7, 2, 1).next_u64()
        );
        let mut r = Rng::derive(7, 0, 0);
        for _ in 0..1000 {
            assert!((3..=5).contains(&r.between(3, 5)));
        }
    }
}
