//! Stream requests.

use super::request::{TypedRequest, unexpected};
use crate::client::Error;
use flo_protocol::{
    GroupConfig, GroupInfo, GroupReadSpec, Op, PendingRecord, Reply, StreamConfig, StreamId,
    StreamInfo, StreamReadSpec, StreamRecord, StreamRecordIn,
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

/// `Client::create_group`: whether it was created.
pub(crate) struct CreateGroup<'a> {
    pub stream: &'a str,
    pub group: &'a str,
    pub config: GroupConfig,
}

impl TypedRequest for CreateGroup<'_> {
    type Output = bool;

    fn op(self, namespace: &str) -> Op {
        Op::StreamGroupCreate {
            namespace: namespace.into(),
            stream: self.stream.into(),
            group: self.group.into(),
            config: self.config,
        }
    }

    fn output(reply: Reply) -> Result<bool, Error> {
        match reply {
            Reply::GroupCreated { created, .. } => Ok(created),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::delete_group`.
pub(crate) struct DeleteGroup<'a> {
    pub stream: &'a str,
    pub group: &'a str,
}

impl TypedRequest for DeleteGroup<'_> {
    type Output = ();

    fn op(self, namespace: &str) -> Op {
        Op::StreamGroupDelete {
            namespace: namespace.into(),
            stream: self.stream.into(),
            group: self.group.into(),
        }
    }

    fn output(reply: Reply) -> Result<(), Error> {
        match reply {
            Reply::GroupDeleted { .. } => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::group_read`.
pub(crate) struct GroupRead {
    pub spec: GroupReadSpec,
}

impl TypedRequest for GroupRead {
    type Output = Vec<StreamRecord>;

    fn op(mut self, namespace: &str) -> Op {
        self.spec.namespace = namespace.into();
        Op::StreamGroupRead(self.spec)
    }

    fn output(reply: Reply) -> Result<Vec<StreamRecord>, Error> {
        match reply {
            Reply::StreamRecords { records, .. } => Ok(records),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::ack` and `Client::nack`: how many of the ids were pending.
pub(crate) struct Settle<'a> {
    pub stream: &'a str,
    pub group: &'a str,
    pub ids: Vec<StreamId>,
    /// None: an ack; Some(delay): a nack.
    pub nack_delay_ms: Option<u64>,
}

impl TypedRequest for Settle<'_> {
    type Output = u64;

    fn op(self, namespace: &str) -> Op {
        let (namespace, stream, group) = (namespace.into(), self.stream.into(), self.group.into());
        match self.nack_delay_ms {
            None => Op::StreamGroupAck {
                namespace,
                stream,
                group,
                ids: self.ids,
            },
            Some(delay) => Op::StreamGroupNack {
                namespace,
                stream,
                group,
                ids: self.ids,
                delay_ms: Some(delay),
            },
        }
    }

    fn output(reply: Reply) -> Result<u64, Error> {
        match reply {
            Reply::GroupAcked { count } => Ok(count),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::group_pending`.
pub(crate) struct GroupPending<'a> {
    pub stream: &'a str,
    pub group: &'a str,
    pub count: Option<u32>,
}

impl TypedRequest for GroupPending<'_> {
    type Output = Vec<PendingRecord>;

    fn op(self, namespace: &str) -> Op {
        Op::StreamGroupPending {
            namespace: namespace.into(),
            stream: self.stream.into(),
            group: self.group.into(),
            count: self.count,
        }
    }

    fn output(reply: Reply) -> Result<Vec<PendingRecord>, Error> {
        match reply {
            Reply::GroupPending(list) => Ok(list),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::groups`.
pub(crate) struct Groups<'a> {
    pub stream: &'a str,
    pub group: Option<&'a str>,
}

impl TypedRequest for Groups<'_> {
    type Output = Vec<GroupInfo>;

    fn op(self, namespace: &str) -> Op {
        Op::StreamGroupInfo {
            namespace: namespace.into(),
            stream: self.stream.into(),
            group: self.group.map(str::to_string),
        }
    }

    fn output(reply: Reply) -> Result<Vec<GroupInfo>, Error> {
        match reply {
            Reply::Groups(list) => Ok(list),
            other => Err(unexpected(other)),
        }
    }
}
