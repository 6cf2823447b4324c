//! The shape of a table entry, and the one way either client sends it.

use crate::client::Error;
use flo_protocol::{ErrorCode, ErrorValue, Op, Reply};

/// One operation, typed: built from the caller's arguments, carried as an `Op`, answered
/// with a `Reply` that holds its output.
pub(crate) trait TypedRequest {
    /// What the caller gets back.
    type Output;

    /// The operation in `namespace` (which the few operations without one ignore).
    fn op(self, namespace: &str) -> Op;

    /// The output `reply` carries; any other reply is an `Error::Protocol`.
    fn output(reply: Reply) -> Result<Self::Output, Error>;
}

/// A client as the table sees it: it sends one operation in its namespace and waits for
/// the reply. Implemented for `&mut Client` (one call at a time) and `&MuxClient` (calls
/// from many threads).
pub(crate) trait Transport {
    /// The namespace of the client's requests.
    fn namespace(&self) -> &str;

    /// Sends one operation and waits for its reply.
    fn call(self, op: Op) -> Result<Reply, Error>;
}

/// Sends `request` through `client` and reads its output from the reply.
pub(crate) fn send<R: TypedRequest>(
    client: impl Transport,
    request: R,
) -> Result<R::Output, Error> {
    let op = request.op(client.namespace());
    R::output(client.call(op)?)
}

/// The error for a reply that does not answer the request sent.
pub(crate) fn unexpected(reply: Reply) -> Error {
    Error::Protocol(format!("unexpected reply: {reply:?}"))
}

/// Whether a call failed because the server does not know the object it names (for a
/// worker: it is not registered, e.g. after a server restart).
pub(crate) fn is_not_found(error: &Error) -> bool {
    matches!(
        error,
        Error::Server(ErrorValue {
            code: ErrorCode::NotFound,
            ..
        })
    )
}
