//! Streams' operations: appends split over partitions and gathered, reads of the
//! partitions a shard holds (merged over shards by the fan-out), descriptions, trims and
//! the retention sweep. The store is `fold::streams`; creating and deleting a stream are
//! definition changes (`definitions`).

mod append;
mod reads;

pub use append::{Appends, append, append_part, on_part_appended};
pub use reads::{
    info_part, merge_infos, merge_reads, merge_trims, read_part, sweep_expired, trim_part,
};
