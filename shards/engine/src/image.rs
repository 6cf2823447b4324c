//! A snapshot image as the engine hands it over: bytes it encoded for the occasion, and
//! chunks of the run index shared with the live index (copy-on-write: sealed chunks never
//! change, so taking an image copies only the small parts and the shard pauses for
//! microseconds per million indexed runs). Written out on another thread.

use std::io;
use std::sync::Arc;

/// One piece of an image, in order.
#[derive(Clone)]
pub enum Part {
    Bytes(Vec<u8>),
    /// Words of a sealed run-index chunk, written little-endian.
    Words(Arc<[u64]>, std::ops::Range<usize>),
}

#[derive(Default, Clone)]
pub struct Image {
    parts: Vec<Part>,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Image({} parts, {} bytes)", self.parts.len(), self.len())
    }
}

/// Words are turned into bytes this many at a time.
const WORDS_PER_WRITE: usize = 8 << 10;

impl Image {
    pub fn push(&mut self, part: Part) {
        self.parts.push(part);
    }

    /// Bytes the image writes.
    pub fn len(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Bytes(b) => b.len() as u64,
                Part::Words(_, range) => range.len() as u64 * 8,
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the image's bytes to `out`, in order.
    pub fn write_to(&self, out: &mut impl io::Write) -> io::Result<()> {
        let mut buf = Vec::with_capacity(WORDS_PER_WRITE * 8);
        for part in &self.parts {
            match part {
                Part::Bytes(b) => out.write_all(b)?,
                Part::Words(words, range) => {
                    let words = words.get(range.clone()).unwrap_or_default();
                    for slice in words.chunks(WORDS_PER_WRITE) {
                        buf.clear();
                        for w in slice {
                            buf.extend_from_slice(&w.to_le_bytes());
                        }
                        out.write_all(&buf)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The image in one piece (tests, the simulation).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len() as usize);
        // Writing into a Vec cannot fail.
        let _ = self.write_to(&mut out);
        out
    }
}

impl From<Vec<u8>> for Image {
    fn from(bytes: Vec<u8>) -> Image {
        Image {
            parts: vec![Part::Bytes(bytes)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_write_in_order_with_words_little_endian() {
        let mut image = Image::from(b"head".to_vec());
        let words: Arc<[u64]> = (0..20_000u64).collect::<Vec<_>>().into();
        image.push(Part::Words(words.clone(), 3..19_999));
        image.push(Part::Bytes(b"tail".to_vec()));
        let bytes = image.to_bytes();
        assert_eq!(bytes.len() as u64, image.len());
        assert_eq!(&bytes[..4], b"head");
        assert_eq!(&bytes[bytes.len() - 4..], b"tail");
        let middle = &bytes[4..bytes.len() - 4];
        let back: Vec<u64> = middle
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(back, words[3..19_999].to_vec());
    }
}
