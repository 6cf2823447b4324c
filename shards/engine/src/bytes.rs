//! Byte values the fold holds and snapshots share: `SharedBytes`, a reference-counted
//! buffer, so taking a copy-on-write view of a store for a snapshot costs a count, not a
//! copy of the value. Written as a MessagePack `bin` (one header, then the bytes: an image
//! is about as large as the payload it holds), read back from a `bin` or from an array of
//! integers (snapshot format 3 and before wrote byte fields that way).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::Arc;

/// Bytes shared between the fold and the snapshot images taken of it. Never changed in
/// place: a new value is a new buffer.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SharedBytes(Arc<Vec<u8>>);

impl SharedBytes {
    pub fn to_vec(&self) -> Vec<u8> {
        self.0.as_ref().clone()
    }
}

impl std::ops::Deref for SharedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for SharedBytes {
    /// Takes the buffer as it is (no copy).
    fn from(bytes: Vec<u8>) -> SharedBytes {
        SharedBytes(Arc::new(bytes))
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.as_slice().fmt(f)
    }
}

impl Serialize for SharedBytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for SharedBytes {
    /// A `bin`, or (older images) an array of integers: `serde_bytes` takes both.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SharedBytes, D::Error> {
        serde_bytes::ByteBuf::deserialize(d).map(|b| SharedBytes::from(b.into_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_written_as_bin_and_read_from_bin_or_an_integer_array() {
        let value = SharedBytes::from((0..=255u8).cycle().take(10_000).collect::<Vec<u8>>());
        let bin = rmp_serde::to_vec(&value).unwrap();
        // bin 16: a 3-byte header, then the bytes.
        assert_eq!(bin.len(), 10_000 + 3);
        assert_eq!(rmp_serde::from_slice::<SharedBytes>(&bin).unwrap(), value);
        // How format 3 wrote a `Vec<u8>`: an array of integers, up to 2 bytes each.
        let array = rmp_serde::to_vec(&value.to_vec()).unwrap();
        assert!(array.len() > 14_900, "{}", array.len());
        assert_eq!(rmp_serde::from_slice::<SharedBytes>(&array).unwrap(), value);
    }

    #[test]
    fn a_clone_shares_the_buffer() {
        let value = SharedBytes::from(vec![7u8; 1 << 20]);
        let copy = value.clone();
        assert!(std::ptr::eq(value.as_ptr(), copy.as_ptr()));
    }
}
