//! Stream operations of the SDK's `Client`: create, append (creating a missing stream with
//! the default settings), read, describe, trim, delete.

use crate::client::{Client, Error};
use crate::requests::{self, RecordsPage, is_not_found, send};
use flo_protocol::{StreamConfig, StreamId, StreamInfo, StreamReadSpec, StreamRecordIn};

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
