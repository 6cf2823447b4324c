//! Key-value requests.

use super::request::{TypedRequest, unexpected};
use crate::client::{Error, Page, PutOptions};
use flo_protocol::{KvEntry, Op, Reply};

/// `Client::kv_put`: the key's new version.
pub(crate) struct KvPut<'a> {
    pub key: &'a str,
    pub value: &'a [u8],
    pub opts: PutOptions,
}

impl TypedRequest for KvPut<'_> {
    type Output = u64;

    fn op(self, namespace: &str) -> Op {
        Op::KvPut {
            namespace: namespace.into(),
            key: self.key.into(),
            value: self.value.to_vec(),
            ttl_ms: self.opts.ttl_ms,
            if_version: self.opts.if_version,
            if_exists: self.opts.if_exists,
        }
    }

    fn output(reply: Reply) -> Result<u64, Error> {
        match reply {
            Reply::KvPut { version } => Ok(version),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::kv_get_wait`, `Client::kv_get_next` (`wait_ms` 0: do not wait).
pub(crate) struct KvGet<'a> {
    pub key: &'a str,
    pub wait_ms: u64,
    pub after_version: Option<u64>,
    /// Without `after_version`: only a version newer than the key's current one.
    pub newer_than_current: bool,
}

impl TypedRequest for KvGet<'_> {
    type Output = Option<KvEntry>;

    fn op(self, namespace: &str) -> Op {
        Op::KvGet {
            namespace: namespace.into(),
            key: self.key.into(),
            wait_ms: (self.wait_ms > 0).then_some(self.wait_ms),
            after_version: self.after_version,
            newer_than_current: self.newer_than_current,
        }
    }

    fn output(reply: Reply) -> Result<Option<KvEntry>, Error> {
        match reply {
            Reply::KvValue(entry) => Ok(entry),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::kv_delete`: whether the key existed.
pub(crate) struct KvDelete<'a> {
    pub key: &'a str,
    pub if_version: Option<u64>,
}

impl TypedRequest for KvDelete<'_> {
    type Output = bool;

    fn op(self, namespace: &str) -> Op {
        Op::KvDelete {
            namespace: namespace.into(),
            key: self.key.into(),
            if_version: self.if_version,
        }
    }

    fn output(reply: Reply) -> Result<bool, Error> {
        match reply {
            Reply::KvDeleted { deleted } => Ok(deleted),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::kv_list_page`.
pub(crate) struct KvListPage<'a> {
    pub prefix: &'a str,
    pub limit: Option<u32>,
    pub cursor: Option<&'a str>,
}

impl TypedRequest for KvListPage<'_> {
    type Output = Page<KvEntry>;

    fn op(self, namespace: &str) -> Op {
        Op::KvList {
            namespace: namespace.into(),
            prefix: self.prefix.into(),
            limit: self.limit,
            cursor: self.cursor.map(str::to_string),
        }
    }

    fn output(reply: Reply) -> Result<Page<KvEntry>, Error> {
        match reply {
            Reply::KvList {
                entries,
                next_cursor,
                ..
            } => Ok(Page {
                items: entries,
                next_cursor,
            }),
            other => Err(unexpected(other)),
        }
    }
}
