//! The Unified Append Log: segment files of checksummed records, written in block-aligned
//! batches, recovered by a scan that tolerates a torn tail and refuses mid-log damage.
//! The log knows bytes, not records: a record is a type code and an opaque payload, and
//! records appended as a group are recovered all or none.

mod acked;
mod buffer;
mod format;
mod read;
mod recovery;

pub use acked::{ACKED_MARK_BYTES, ACKED_MARK_FILE, ACKED_SLOT_BYTES, acked_slot, read_acked_mark};
pub use buffer::{Batch, LogBuffer};
pub use format::{
    AppendError, BLOCK_BYTES, FLAG_BATCH_START, FLAG_GROUP_CONT, LSN_MAX, RECORD_HEADER_BYTES,
    RECORD_PAYLOAD_BYTES_MAX, SEGMENT_BYTES_DEFAULT, SEGMENT_BYTES_MIN, align_up,
    parse_segment_file_name, segment_file_name,
};
pub use read::{Found, MARK_SPACING_BYTES, find_record, segment_marks};
pub use recovery::{
    ApplyError, BATCHES_IN_FLIGHT_MAX, RecoveredLog, RecoveryError, SegmentInfo, recover,
    recover_from,
};
