//! Streams' operations: appends, group reads, acks and nacks split over partitions and
//! gathered (`scatter`), deliveries and acks on a partition's owner (`groups`), reads of the
//! partitions a shard holds (merged over shards by the fan-out), descriptions, trims and the
//! retention sweep. The store is `fold::streams` and `fold::stream_groups`; creating and
//! deleting a stream or a group are definition changes (`definitions`).

mod groups;
mod reads;
mod scatter;

pub use groups::{
    info_part as group_info_part, merge_infos as merge_group_infos, merge_pending, pending_part,
};
pub use reads::{
    info_part, merge_infos, merge_reads, merge_trims, read_part, sweep_expired, trim_part,
};
pub use scatter::{Scatter, append_part, conn_closed, do_part, on_part, poll_parked, scatter};
