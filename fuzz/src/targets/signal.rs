//! A target's fingerprint of one run: an FNV-1a hash of the small facts it adds.

#[derive(Debug, Clone, Copy)]
pub struct Signal(u64);

impl Default for Signal {
    fn default() -> Signal {
        Signal(0xcbf2_9ce4_8422_2325)
    }
}

impl Signal {
    pub fn add(&mut self, value: u64) {
        for b in value.to_le_bytes() {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }

    pub fn add_bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// A length as its power-of-two bucket.
    pub fn add_len(&mut self, len: usize) {
        self.add(usize::BITS as u64 - len.leading_zeros() as u64);
    }

    /// An error message without its numbers and quoted parts (which vary with the input
    /// rather than with the path taken).
    pub fn add_message(&mut self, message: &str) {
        let mut quoted = false;
        for b in message.bytes().take(160) {
            match b {
                b'"' | b'`' => quoted = !quoted,
                _ if quoted || b.is_ascii_digit() => {}
                _ => self.add_bytes(&[b]),
            }
        }
    }

    pub fn value(self) -> u64 {
        self.0
    }
}
