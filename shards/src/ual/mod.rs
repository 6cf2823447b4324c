//! The Unified Append Log: segment files of checksummed records, written in block-aligned
//! batches, recovered by a scan that tolerates a torn tail and refuses mid-log damage.

mod buffer;
mod format;
mod recovery;

pub use buffer::{Batch, LogBuffer};
pub use format::{
    BLOCK_BYTES, FLAG_BATCH_START, RECORD_HEADER_BYTES, RECORD_PAYLOAD_BYTES_MAX,
    SEGMENT_BYTES_DEFAULT, SEGMENT_BYTES_MIN, align_up, parse_segment_file_name, segment_file_name,
};
pub use recovery::{RecoveredLog, RecoveryError, SegmentInfo, recover};
