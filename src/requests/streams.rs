//! Stream requests.

use super::request::{TypedRequest, unexpected};
use crate::client::Error;
use flo_protocol::{
    Op, Reply, StreamConfig, StreamId, StreamInfo, StreamReadSpec, StreamRecord, StreamRecordIn,
};

/// `Client::create_stream`: whether it was created (false: it existed with these settings).
pub(crate) struct CreateStream<'a> {
    pub name: &'a str,
    pub config: StreamConfig,
}

impl TypedRequest for CreateStream<'_> {
    type Output = bool;

    fn op(self, namespace: &str) -> Op {
        Op::StreamCreate {
            namespace: namespace.into(),
            name: self.name.into(),
            config: self.config,
        }
    }

    fn output(reply: Reply) -> Result<bool, Error> {
        match reply {
            Reply::StreamCreated { created, .. } => Ok(created),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::delete_stream`.
pub(crate) struct DeleteStream<'a> {
    pub name: &'a str,
}

impl TypedRequest for DeleteStream<'_> {
    type Output = ();

    fn op(self, namespace: &str) -> Op {
        Op::StreamDelete {
            namespace: namespace.into(),
            name: self.name.into(),
        }
    }

    fn output(reply: Reply) -> Result<(), Error> {
        match reply {
            Reply::StreamDeleted { .. } => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::append`: the records' ids, in the order given.
pub(crate) struct Append<'a> {
    pub stream: &'a str,
    pub records: Vec<StreamRecordIn>,
    pub partition: Option<u32>,
}

impl TypedRequest for Append<'_> {
    type Output = Vec<StreamId>;

    fn op(self, namespace: &str) -> Op {
        Op::StreamAppend {
            namespace: namespace.into(),
            stream: self.stream.into(),
            records: self.records,
            partition: self.partition,
        }
    }

    fn output(reply: Reply) -> Result<Vec<StreamId>, Error> {
        match reply {
            Reply::StreamAppended { ids } => Ok(ids),
            other => Err(unexpected(other)),
        }
    }
}

/// A page of records read, and the id to read on after (None: nothing more for now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordsPage {
    pub records: Vec<StreamRecord>,
    pub next_after: Option<StreamId>,
}

/// `Client::read_stream`.
pub(crate) struct ReadStream {
    pub spec: StreamReadSpec,
}

impl TypedRequest for ReadStream {
    type Output = RecordsPage;

    fn op(mut self, namespace: &str) -> Op {
        self.spec.namespace = namespace.into();
        Op::StreamRead(self.spec)
    }

    fn output(reply: Reply) -> Result<RecordsPage, Error> {
        match reply {
            Reply::StreamRecords {
                records,
                next_after,
            } => Ok(RecordsPage {
                records,
                next_after,
            }),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::stream`.
pub(crate) struct GetStream<'a> {
    pub name: &'a str,
}

impl TypedRequest for GetStream<'_> {
    type Output = StreamInfo;

    fn op(self, namespace: &str) -> Op {
        Op::StreamGet {
            namespace: namespace.into(),
            name: self.name.into(),
        }
    }

    fn output(reply: Reply) -> Result<StreamInfo, Error> {
        match reply {
            Reply::Stream(info) => Ok(info),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::list_streams`.
pub(crate) struct ListStreams;

impl TypedRequest for ListStreams {
    type Output = Vec<StreamInfo>;

    fn op(self, namespace: &str) -> Op {
        Op::StreamList {
            namespace: namespace.into(),
        }
    }

    fn output(reply: Reply) -> Result<Vec<StreamInfo>, Error> {
        match reply {
            Reply::Streams(infos) => Ok(infos),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::trim_stream`: how many records were (or, dry, would be) removed.
pub(crate) struct TrimStream<'a> {
    pub stream: &'a str,
    pub before: StreamId,
    pub dry_run: bool,
}

impl TypedRequest for TrimStream<'_> {
    type Output = u64;

    fn op(self, namespace: &str) -> Op {
        Op::StreamTrim {
            namespace: namespace.into(),
            stream: self.stream.into(),
            before: self.before,
            dry_run: self.dry_run,
        }
    }

    fn output(reply: Reply) -> Result<u64, Error> {
        match reply {
            Reply::StreamTrimmed { removed } => Ok(removed),
            other => Err(unexpected(other)),
        }
    }
}
