//! Stream operations of the SDK's `Client`: create, append (creating a missing stream with
//! the default settings), read, describe, trim, delete.

use crate::client::{Client, Error};
use crate::requests::{self, RecordsPage, is_not_found, send};
use flo_protocol::{
    GroupConfig, GroupInfo, GroupReadSpec, PendingRecord, StreamConfig, StreamId, StreamInfo,
    StreamReadSpec, StreamRecord, StreamRecordIn,
};

/// Stream operations.
impl Client {
    /// Creates a stream; false when it existed with these settings (other settings: a
    /// conflict error).
    pub fn create_stream(&mut self, name: &str, config: StreamConfig) -> Result<bool, Error> {
        send(self, requests::CreateStream { name, config })
    }

    /// Deletes a stream and every record it holds.
    pub fn delete_stream(&mut self, name: &str) -> Result<(), Error> {
        send(self, requests::DeleteStream { name })
    }

    /// Appends records (by key to their partitions, the others to one partition in turn);
    /// returns their ids in the order given, once durable. A stream that does not exist is
    /// created with the default settings.
    pub fn append(
        &mut self,
        stream: &str,
        records: Vec<StreamRecordIn>,
    ) -> Result<Vec<StreamId>, Error> {
        self.append_to(stream, records, None)
    }

    /// Like `append`, with every record in `partition` when one is given.
    pub fn append_to(
        &mut self,
        stream: &str,
        records: Vec<StreamRecordIn>,
        partition: Option<u32>,
    ) -> Result<Vec<StreamId>, Error> {
        let append = |records| requests::Append {
            stream,
            records,
            partition,
        };
        match send(&mut *self, append(records.clone())) {
            Err(e) if is_not_found(&e) => {
                self.create_stream(stream, StreamConfig::default())?;
                send(self, append(records))
            }
            result => result,
        }
    }

    /// Records of a stream: after `spec.after` (or the newest, `spec.tail`), of one
    /// partition or all merged in id order. `spec.namespace` is the client's.
    pub fn read_stream(&mut self, spec: StreamReadSpec) -> Result<RecordsPage, Error> {
        send(self, requests::ReadStream { spec })
    }

    pub fn stream(&mut self, name: &str) -> Result<StreamInfo, Error> {
        send(self, requests::GetStream { name })
    }

    pub fn list_streams(&mut self) -> Result<Vec<StreamInfo>, Error> {
        send(self, requests::ListStreams)
    }

    /// Creates a consumer group; false when it existed with these settings.
    pub fn create_group(
        &mut self,
        stream: &str,
        group: &str,
        config: GroupConfig,
    ) -> Result<bool, Error> {
        send(
            self,
            requests::CreateGroup {
                stream,
                group,
                config,
            },
        )
    }

    pub fn delete_group(&mut self, stream: &str, group: &str) -> Result<(), Error> {
        send(self, requests::DeleteGroup { stream, group })
    }

    /// Records for `spec.consumer` of a group (redeliveries due first, then new ones),
    /// waiting up to `spec.block_ms` for one; empty when none came. `spec.namespace` is
    /// the client's.
    pub fn group_read(&mut self, spec: GroupReadSpec) -> Result<Vec<StreamRecord>, Error> {
        send(self, requests::GroupRead { spec })
    }

    /// Acknowledges records: they are never delivered again. Returns how many were pending.
    pub fn ack(&mut self, stream: &str, group: &str, ids: Vec<StreamId>) -> Result<u64, Error> {
        let settle = requests::Settle {
            stream,
            group,
            ids,
            nack_delay_ms: None,
        };
        send(self, settle)
    }

    /// Has records delivered again (to any consumer) after `delay_ms`.
    pub fn nack(
        &mut self,
        stream: &str,
        group: &str,
        ids: Vec<StreamId>,
        delay_ms: u64,
    ) -> Result<u64, Error> {
        let settle = requests::Settle {
            stream,
            group,
            ids,
            nack_delay_ms: Some(delay_ms),
        };
        send(self, settle)
    }

    /// Records delivered and not acknowledged, oldest first.
    pub fn group_pending(
        &mut self,
        stream: &str,
        group: &str,
        count: Option<u32>,
    ) -> Result<Vec<PendingRecord>, Error> {
        send(
            self,
            requests::GroupPending {
                stream,
                group,
                count,
            },
        )
    }

    /// The groups of a stream (or the one named) and where they stand.
    pub fn groups(&mut self, stream: &str, group: Option<&str>) -> Result<Vec<GroupInfo>, Error> {
        send(self, requests::Groups { stream, group })
    }

    /// Removes the records below `before`; returns how many (a dry run only counts them).
    pub fn trim_stream(
        &mut self,
        stream: &str,
        before: StreamId,
        dry_run: bool,
    ) -> Result<u64, Error> {
        send(
            self,
            requests::TrimStream {
                stream,
                before,
                dry_run,
            },
        )
    }
}
