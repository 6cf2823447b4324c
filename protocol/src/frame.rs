//! Frame = u32 big-endian payload length, then one MessagePack value of that length.

use serde::{Serialize, de::DeserializeOwned};

/// Bytes of the length prefix.
pub const FRAME_HEADER_BYTES: usize = 4;
/// Largest payload a peer may send; checked before any allocation.
pub const FRAME_BYTES_MAX: usize = 4 << 20;
/// Deepest nesting of arrays and maps a payload may have. Messages nest about 8 levels;
/// rmp_serde's default (1,024 levels of a value it skips, such as an unknown field's)
/// overflowed a 2 MiB thread stack in a debug build (found by fuzzing).
pub const MESSAGE_DEPTH_MAX: usize = 64;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the maximum of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("malformed message: {0}")]
    Malformed(String),
    #[error("cannot encode message: {0}")]
    Encode(String),
}

/// Appends one frame holding `value` to `out`.
pub fn encode_frame<T: Serialize>(value: &T, out: &mut Vec<u8>) -> Result<(), FrameError> {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
    let mut ser = rmp_serde::Serializer::new(&mut *out).with_struct_map();
    if let Err(e) = value.serialize(&mut ser) {
        out.truncate(start);
        return Err(FrameError::Encode(e.to_string()));
    }
    let len = out.len() - start - FRAME_HEADER_BYTES;
    if len > FRAME_BYTES_MAX {
        out.truncate(start);
        return Err(FrameError::TooLarge {
            len,
            max: FRAME_BYTES_MAX,
        });
    }
    out[start..start + FRAME_HEADER_BYTES].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

/// Looks for one complete frame at the start of `buf`.
///
/// `Ok(None)`: more bytes are needed. `Ok(Some((payload, consumed)))`: a frame's payload.
/// `Err(TooLarge)`: the declared length is over `max`; the stream cannot be resynchronised.
pub fn split_frame(buf: &[u8], max: usize) -> Result<Option<(&[u8], usize)>, FrameError> {
    if buf.len() < FRAME_HEADER_BYTES {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let end = FRAME_HEADER_BYTES + len;
    if buf.len() < end {
        return Ok(None);
    }
    Ok(Some((&buf[FRAME_HEADER_BYTES..end], end)))
}

/// Decodes one frame from the start of `buf`: `Ok(None)` when incomplete, otherwise the
/// value and the bytes consumed. A frame whose payload does not decode is `Malformed`
/// (its bytes can be skipped: `consumed` is known from the header).
pub fn decode_frame<T: DeserializeOwned>(buf: &[u8]) -> Result<Option<(T, usize)>, FrameError> {
    let Some((payload, consumed)) = split_frame(buf, FRAME_BYTES_MAX)? else {
        return Ok(None);
    };
    let value = decode_payload(payload)?;
    Ok(Some((value, consumed)))
}

/// Decodes a frame payload (the bytes after the length prefix), nested at most
/// `MESSAGE_DEPTH_MAX` levels.
pub fn decode_payload<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    let mut de = rmp_serde::Deserializer::from_read_ref(payload);
    de.set_max_depth(MESSAGE_DEPTH_MAX);
    T::deserialize(&mut de).map_err(|e| FrameError::Malformed(e.to_string()))
}
