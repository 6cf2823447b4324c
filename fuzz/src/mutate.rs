//! The mutation engine: turns one corpus input into a new one by a short stack of random
//! edits — bit and byte changes, interesting integers (binary and as decimal text),
//! inserted, deleted, duplicated and copied ranges, lines, tokens of the target's
//! dictionary, and splices with another corpus input.

use flo_testkit::Rng;

/// Most edits stacked on one input (a power of two from 1 to this).
pub const STACK_MAX: usize = 16;
/// Longest range one edit inserts, deletes or copies.
pub const CHUNK_BYTES_MAX: usize = 256;
/// Most copies of a short range one edit inserts (deep nesting, long runs).
pub const REPEATS_MAX: usize = 4096;

const INTERESTING_8: &[i8] = &[-128, -1, 0, 1, 16, 32, 64, 100, 127];
const INTERESTING_16: &[i16] = &[-32768, -129, 128, 255, 256, 512, 1000, 1024, 4096, 32767];
const INTERESTING_32: &[i32] = &[
    -2147483648,
    -100663046,
    -32769,
    32768,
    65535,
    65536,
    100663045,
    2147483647,
    // Block size, frame and record limits, one over them.
    4096,
    4 << 20,
    (4 << 20) + 1,
    8 << 20,
    (8 << 20) + 1,
];
const INTERESTING_64: &[i64] = &[i64::MIN, i64::MAX, -1, 1 << 32, (1 << 32) - 1, 1 << 53];
/// Numbers as text, for numeric fields of text formats.
const INTERESTING_TEXT: &[&str] = &[
    "0",
    "1",
    "-1",
    "255",
    "256",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "1e308",
    "1e400",
    "0.5",
    "-0",
    "0x10",
    ".inf",
    ".nan",
];

/// The edits, drawn with equal chances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit {
    FlipBit,
    RandomByte,
    AddToByte,
    Interesting8,
    Interesting16,
    Interesting32,
    Interesting64,
    AddToWord,
    NumberText,
    DeleteRange,
    InsertRandom,
    InsertRepeated,
    DuplicateRange,
    RepeatRange,
    CopyRange,
    InsertToken,
    OverwriteToken,
    DuplicateLine,
    DeleteLine,
    InsertLineFromOther,
    InsertFromOther,
    Splice,
    Truncate,
}

const EDITS: &[Edit] = &[
    Edit::FlipBit,
    Edit::RandomByte,
    Edit::AddToByte,
    Edit::Interesting8,
    Edit::Interesting16,
    Edit::Interesting32,
    Edit::Interesting64,
    Edit::AddToWord,
    Edit::NumberText,
    Edit::DeleteRange,
    Edit::InsertRandom,
    Edit::InsertRepeated,
    Edit::DuplicateRange,
    Edit::RepeatRange,
    Edit::CopyRange,
    Edit::InsertToken,
    Edit::OverwriteToken,
    Edit::DuplicateLine,
    Edit::DeleteLine,
    Edit::InsertLineFromOther,
    Edit::InsertFromOther,
    Edit::Splice,
    Edit::Truncate,
];

pub struct Mutator {
    rng: Rng,
    dictionary: &'static [&'static [u8]],
    len_max: usize,
}

impl Mutator {
    pub fn new(seed: u64, dictionary: &'static [&'static [u8]], len_max: usize) -> Mutator {
        Mutator {
            rng: Rng::new(seed),
            dictionary,
            len_max,
        }
    }

    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// Applies a stack of 1 to `STACK_MAX` edits to `data`; `other` is another corpus
    /// input to splice from. The result is at most `len_max` bytes.
    pub fn mutate(&mut self, data: &mut Vec<u8>, other: &[u8]) {
        let stack = 1 << self.rng.index(STACK_MAX.trailing_zeros() as usize + 1);
        for _ in 0..stack {
            let edit = *self.rng.pick(EDITS);
            self.apply(edit, data, other);
        }
        data.truncate(self.len_max);
    }

    fn apply(&mut self, edit: Edit, data: &mut Vec<u8>, other: &[u8]) {
        match edit {
            Edit::FlipBit => {
                if let Some(i) = self.position(data) {
                    data[i] ^= 1 << self.rng.index(8);
                }
            }
            Edit::RandomByte => {
                if let Some(i) = self.position(data) {
                    data[i] = self.rng.byte();
                }
            }
            Edit::AddToByte => {
                if let Some(i) = self.position(data) {
                    let delta = 1 + self.rng.index(35) as u8;
                    data[i] = match self.rng.one_in(2) {
                        true => data[i].wrapping_add(delta),
                        false => data[i].wrapping_sub(delta),
                    };
                }
            }
            Edit::Interesting8 => {
                let v = *self.rng.pick(INTERESTING_8);
                self.put_word(data, &v.to_le_bytes());
            }
            Edit::Interesting16 => {
                let v = *self.rng.pick(INTERESTING_16);
                let bytes = self.either_endian(v.to_le_bytes(), v.to_be_bytes());
                self.put_word(data, &bytes);
            }
            Edit::Interesting32 => {
                let v = *self.rng.pick(INTERESTING_32);
                let bytes = self.either_endian(v.to_le_bytes(), v.to_be_bytes());
                self.put_word(data, &bytes);
            }
            Edit::Interesting64 => {
                let v = *self.rng.pick(INTERESTING_64);
                let bytes = self.either_endian(v.to_le_bytes(), v.to_be_bytes());
                self.put_word(data, &bytes);
            }
            Edit::AddToWord => self.add_to_word(data),
            Edit::NumberText => self.number_text(data),
            Edit::DeleteRange => {
                if let Some((start, len)) = self.range(data) {
                    data.drain(start..start + len);
                }
            }
            Edit::InsertRandom => {
                let len = 1 + self.rng.index(16);
                let bytes: Vec<u8> = (0..len).map(|_| self.rng.byte()).collect();
                self.insert(data, &bytes);
            }
            Edit::InsertRepeated => {
                let len = 1 + self.rng.index(CHUNK_BYTES_MAX);
                let byte = match self.rng.one_in(2) {
                    true => self.rng.byte(),
                    false => *self.rng.pick(b"\0 \n{[-a0\xff"),
                };
                self.insert(data, &vec![byte; len]);
            }
            Edit::DuplicateRange => {
                if let Some((start, len)) = self.range(data) {
                    let chunk = data[start..start + len].to_vec();
                    self.insert(data, &chunk);
                }
            }
            Edit::RepeatRange => {
                if let Some((start, len)) = self.range(data) {
                    let len = len.min(8);
                    // Log-uniform: mostly a few copies, now and then thousands.
                    let scale = 1 << self.rng.index(REPEATS_MAX.trailing_zeros() as usize + 1);
                    let times = 1 + self.rng.index(scale);
                    let unit = data[start..start + len].to_vec();
                    let room = self.len_max.saturating_sub(data.len()) / len;
                    let copies = unit.repeat(times.min(room));
                    data.splice(start..start, copies);
                }
            }
            Edit::CopyRange => {
                if let Some((start, len)) = self.range(data) {
                    let to = self.rng.index(data.len() - len + 1);
                    data.copy_within(start..start + len, to);
                }
            }
            Edit::InsertToken => {
                if let Some(token) = self.token() {
                    self.insert(data, token);
                }
            }
            Edit::OverwriteToken => {
                if let Some(token) = self.token()
                    && token.len() <= data.len()
                {
                    let at = self.rng.index(data.len() - token.len() + 1);
                    data[at..at + token.len()].copy_from_slice(token);
                }
            }
            Edit::DuplicateLine => {
                if let Some(line) = self.line(data) {
                    let line = data[line].to_vec();
                    self.insert_at_line_start(data, &line);
                }
            }
            Edit::DeleteLine => {
                if let Some(line) = self.line(data) {
                    data.drain(line);
                }
            }
            Edit::InsertLineFromOther => {
                if let Some(line) = self.line(other) {
                    self.insert_at_line_start(data, &other[line]);
                }
            }
            Edit::InsertFromOther => {
                if let Some((start, len)) = self.range(other) {
                    self.insert(data, &other[start..start + len]);
                }
            }
            Edit::Splice => {
                // The head of this input and the tail of the other.
                let cut = self.rng.index(data.len() + 1);
                let from = self.rng.index(other.len() + 1);
                data.truncate(cut);
                data.extend_from_slice(&other[from..]);
            }
            Edit::Truncate => {
                if !data.is_empty() {
                    let keep = self.rng.index(data.len());
                    data.truncate(keep);
                }
            }
        }
    }

    fn position(&mut self, data: &[u8]) -> Option<usize> {
        (!data.is_empty()).then(|| self.rng.index(data.len()))
    }

    /// A non-empty range of `data`, at most `CHUNK_BYTES_MAX` long.
    fn range(&mut self, data: &[u8]) -> Option<(usize, usize)> {
        if data.is_empty() {
            return None;
        }
        let len = 1 + self.rng.index(data.len().min(CHUNK_BYTES_MAX));
        let start = self.rng.index(data.len() - len + 1);
        Some((start, len))
    }

    /// One whole line of `data` (with its newline), at a random line start.
    fn line(&mut self, data: &[u8]) -> Option<std::ops::Range<usize>> {
        let at = self.position(data)?;
        let start = data[..at]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let end = data[at..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(data.len(), |i| at + i + 1);
        Some(start..end)
    }

    fn insert_at_line_start(&mut self, data: &mut Vec<u8>, line: &[u8]) {
        let at = self.rng.index(data.len() + 1);
        let start = data[..at]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let mut line = line.to_vec();
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        self.insert_at(data, start, &line);
    }

    fn token(&mut self) -> Option<&'static [u8]> {
        (!self.dictionary.is_empty()).then(|| *self.rng.pick(self.dictionary))
    }

    fn insert(&mut self, data: &mut Vec<u8>, bytes: &[u8]) {
        let at = self.rng.index(data.len() + 1);
        self.insert_at(data, at, bytes);
    }

    fn insert_at(&mut self, data: &mut Vec<u8>, at: usize, bytes: &[u8]) {
        if data.len() + bytes.len() > self.len_max {
            return;
        }
        data.splice(at..at, bytes.iter().copied());
    }

    fn either_endian<const N: usize>(&mut self, le: [u8; N], be: [u8; N]) -> [u8; N] {
        match self.rng.one_in(2) {
            true => le,
            false => be,
        }
    }

    /// Overwrites `word.len()` bytes at a random place (or appends when `data` is shorter).
    fn put_word(&mut self, data: &mut Vec<u8>, word: &[u8]) {
        if data.len() < word.len() {
            self.insert(data, word);
            return;
        }
        let at = self.rng.index(data.len() - word.len() + 1);
        data[at..at + word.len()].copy_from_slice(word);
    }

    /// Adds or subtracts a small number to a 16/32-bit word, either endianness.
    fn add_to_word(&mut self, data: &mut [u8]) {
        let width = *self.rng.pick(&[2usize, 4]);
        if data.len() < width {
            return;
        }
        let at = self.rng.index(data.len() - width + 1);
        let delta = 1 + self.rng.index(35) as u32;
        let big = self.rng.one_in(2);
        let word = &mut data[at..at + width];
        let mut v = 0u32;
        for (i, &b) in word.iter().enumerate() {
            let shift = if big { (width - 1 - i) * 8 } else { i * 8 };
            v |= (b as u32) << shift;
        }
        v = match self.rng.one_in(2) {
            true => v.wrapping_add(delta),
            false => v.wrapping_sub(delta),
        };
        for (i, b) in word.iter_mut().enumerate() {
            let shift = if big { (width - 1 - i) * 8 } else { i * 8 };
            *b = (v >> shift) as u8;
        }
    }

    /// Replaces a run of ASCII digits with an interesting number written out, or inserts one.
    fn number_text(&mut self, data: &mut Vec<u8>) {
        let number = self.rng.pick(INTERESTING_TEXT).as_bytes();
        let digits: Vec<usize> = (0..data.len())
            .filter(|&i| data[i].is_ascii_digit() && (i == 0 || !data[i - 1].is_ascii_digit()))
            .collect();
        if digits.is_empty() {
            self.insert(data, number);
            return;
        }
        let start = *self.rng.pick(&digits);
        let len = data[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if data.len() - len + number.len() > self.len_max {
            return;
        }
        data.splice(start..start + len, number.iter().copied());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DICT: &[&[u8]] = &[b"TOKEN"];

    #[test]
    fn every_edit_keeps_the_input_within_its_limit_even_when_empty() {
        let mut m = Mutator::new(1, DICT, 64);
        for &edit in EDITS {
            for seed_len in [0usize, 1, 3, 63, 64] {
                let mut data = vec![b'7'; seed_len];
                for _ in 0..50 {
                    m.apply(edit, &mut data, b"other\ninput 12\n");
                    data.truncate(64);
                }
                assert!(data.len() <= 64, "{edit:?}");
            }
        }
    }

    #[test]
    fn mutations_change_inputs_and_are_a_function_of_the_seed() {
        let run = |seed| {
            let mut m = Mutator::new(seed, DICT, 1024);
            (0..100)
                .map(|_| {
                    let mut data = b"kind: Workflow\nname: w\nversion: \"1\"\n".to_vec();
                    m.mutate(&mut data, b"steps:\n  a: {}\n");
                    data
                })
                .collect::<Vec<_>>()
        };
        let a = run(5);
        assert_eq!(a, run(5));
        assert_ne!(a, run(6));
        let original = b"kind: Workflow\nname: w\nversion: \"1\"\n".to_vec();
        assert!(a.iter().filter(|d| **d != original).count() > 90);
    }

    #[test]
    fn tokens_and_numbers_get_in() {
        let mut m = Mutator::new(3, DICT, 1024);
        let mut saw_token = false;
        let mut saw_number = false;
        for _ in 0..200 {
            let mut data = b"timeout: 10\n".to_vec();
            m.apply(Edit::InsertToken, &mut data, b"");
            saw_token |= data.windows(5).any(|w| w == b"TOKEN");
            let mut data = b"timeout: 10\n".to_vec();
            m.apply(Edit::NumberText, &mut data, b"");
            saw_number |= data.starts_with(b"timeout: ") && data != b"timeout: 10\n";
        }
        assert!(saw_token && saw_number);
    }
}
