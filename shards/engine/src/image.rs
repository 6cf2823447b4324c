//! A snapshot image as the engine hands it over: bytes it encoded for the occasion,
//! chunks of the run index shared with the live index (copy-on-write: sealed chunks never
//! change, so taking an image copies only the small parts and the shard pauses for
//! microseconds per million indexed runs), and views of stores encoded only when the image
//! is written (`Part::Later`: the KV store, whose values are shared, not copied). Written
//! out on another thread: the encoding of the bulk happens there, not on the shard.

use std::io;
use std::sync::{Arc, OnceLock};

/// A part encoded when the image is written, on the writer's thread. `encode` must write
/// the same bytes each time it is called (the image's length is counted by a first call).
pub trait Encode: Send + Sync {
    fn encode(&self, out: &mut dyn io::Write) -> io::Result<()>;
}

/// One piece of an image, in order.
#[derive(Clone)]
pub enum Part {
    Bytes(Vec<u8>),
    /// Words of a sealed run-index chunk, written little-endian.
    Words(Arc<[u64]>, std::ops::Range<usize>),
    /// Encoded when written; its length, once counted.
    Later(Arc<dyn Encode>, Arc<OnceLock<u64>>),
}

impl Part {
    /// A part encoded when the image is written.
    pub fn later(encode: Arc<dyn Encode>) -> Part {
        Part::Later(encode, Default::default())
    }
}

/// Counts what is written to it and keeps nothing.
#[derive(Default)]
struct Counter(u64);

impl io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Passes bytes on to `out`, counting them.
struct Counted<'a> {
    out: &'a mut dyn io::Write,
    bytes: u64,
}

impl io::Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

fn later_len(encode: &dyn Encode, len: &OnceLock<u64>) -> u64 {
    *len.get_or_init(|| {
        let mut counter = Counter::default();
        // A counter never fails; an encoder that does writes nothing (and fails again
        // when the image is written, which then reports it).
        match encode.encode(&mut counter) {
            Ok(()) => counter.0,
            Err(_) => 0,
        }
    })
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

    /// Bytes the image writes. The first call encodes each `Later` part once to count it:
    /// call it on the writer's thread, not the shard's.
    pub fn len(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Bytes(b) => b.len() as u64,
                Part::Words(_, range) => range.len() as u64 * 8,
                Part::Later(encode, len) => later_len(encode.as_ref(), len),
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
                Part::Later(encode, len) => {
                    let expected = later_len(encode.as_ref(), len);
                    let mut counted = Counted { out, bytes: 0 };
                    encode.encode(&mut counted)?;
                    // The length went ahead in the file: a part that wrote otherwise would
                    // make it unreadable.
                    if counted.bytes != expected {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "an image part wrote {} bytes, not the {expected} counted",
                                counted.bytes
                            ),
                        ));
                    }
                }
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

    struct Repeat(u8, usize);
    impl Encode for Repeat {
        fn encode(&self, out: &mut dyn io::Write) -> io::Result<()> {
            out.write_all(&vec![self.0; self.1])
        }
    }

    #[test]
    fn a_later_part_is_counted_then_written_in_its_place() {
        let mut image = Image::from(b"head".to_vec());
        image.push(Part::later(Arc::new(Repeat(9, 100_000))));
        image.push(Part::Bytes(b"tail".to_vec()));
        assert_eq!(image.len(), 100_008);
        let bytes = image.to_bytes();
        assert_eq!(bytes.len(), 100_008);
        assert!(bytes[4..100_004].iter().all(|b| *b == 9));
        assert_eq!(&bytes[100_004..], b"tail");
    }

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
