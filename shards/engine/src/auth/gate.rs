//! A connection's gate on a server with an auth file: the handshake presents a token,
//! every later request is authorized against what it grants before it enters the shard.

use super::file::{AuthTable, Namespaces};
use super::policy::{authorize, namespace_of, op_name};
use crate::line_budget::LineBudget;
use flo_protocol::{ErrorCode, ErrorValue, Op, Reply};
use std::sync::Arc;

/// Who a connection is, as far as the gate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Session {
    /// No valid token presented yet: only a handshake is accepted.
    #[default]
    Anonymous,
    /// The auth table's entry whose token the handshake presented.
    Authenticated(usize),
}

/// A refused request: the error to answer with, and a line for the server's log (None
/// when the rate limit holds it back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub error: ErrorValue,
    pub log_line: Option<String>,
}

/// Denials logged per second and shard; the rest are counted and the count is logged with
/// the next line that may be written.
pub const DENIAL_LINES_PER_SECOND_MAX: u32 = 10;

/// One shard's gate: the auth table (shared by all shards) and the shard's log limit.
#[derive(Debug)]
pub struct Gate {
    table: Arc<AuthTable>,
    denials: LineBudget,
}

impl Gate {
    pub fn new(table: Arc<AuthTable>) -> Gate {
        Gate {
            table,
            denials: LineBudget::new(DENIAL_LINES_PER_SECOND_MAX),
        }
    }

    /// Whether `op` may pass, for a connection in `session`. A handshake sets the session:
    /// authenticated by a valid token, anonymous otherwise (and refused).
    pub fn check(&self, session: &mut Session, op: &Op, now_ms: u64) -> Result<(), Refusal> {
        if let Op::Hello { token, .. } = op {
            let found = token.as_ref().and_then(|t| self.table.lookup(t.expose()));
            *session = found.map_or(Session::Anonymous, Session::Authenticated);
            return match (token, found) {
                (_, Some(_)) => Ok(()),
                (None, None) => Err(self.refuse(
                    op,
                    None,
                    "this server requires a token: give --token or FLO_TOKEN (SDK: a token \
                     option)",
                    now_ms,
                )),
                (Some(_), None) => {
                    Err(self.refuse(op, None, "the token is not valid on this server", now_ms))
                }
            };
        }
        let Session::Authenticated(index) = *session else {
            let message = "no valid token: the connection's handshake must present one";
            return Err(self.refuse(op, None, message, now_ms));
        };
        let principal = self.table.principal(index);
        authorize(principal, op).map_err(|d| self.refuse(op, Some(index), &d.message, now_ms))
    }

    /// Hides from `reply` what `session` may not see: a server status adds up every
    /// namespace's data, so only a token for every namespace sees its counts (the others
    /// see the server's health: LSNs, segments, snapshots, disk).
    pub fn redact(&self, session: Session, reply: &mut Reply) {
        if !self.sees_all(session) {
            hide_counts(reply);
        }
    }

    /// Whether `session` may see what adds up every namespace (`redact`).
    pub fn sees_all(&self, session: Session) -> bool {
        match session {
            Session::Authenticated(i) => self.table.principal(i).namespaces == Namespaces::All,
            Session::Anonymous => false,
        }
    }

    fn refuse(&self, op: &Op, who: Option<usize>, why: &str, now_ms: u64) -> Refusal {
        let error = ErrorValue::new(ErrorCode::Unauthorized, format!("not authorized: {why}"));
        let log_line = self.denials.admit(now_ms).map(|suppressed| {
            let by = match who {
                Some(i) => {
                    let p = self.table.principal(i);
                    format!("{} (role {})", p.name, p.role.as_str())
                }
                None => "an unauthenticated connection".to_string(),
            };
            let namespace = namespace_of(op)
                .map(|ns| format!(" in namespace \"{ns}\""))
                .unwrap_or_default();
            let more = match suppressed {
                0 => String::new(),
                n => format!(" ({n} earlier denials not logged)"),
            };
            format!(
                "unauthorized {}{namespace} by {by}: {why}{more}",
                op_name(op)
            )
        });
        Refusal { error, log_line }
    }
}

/// Zeroes the counts of a server status that add up every namespace's data (for a
/// connection that may not see them all: `Gate::sees_all`); other replies are left alone.
pub fn hide_counts(reply: &mut Reply) {
    let Reply::Status(status) = reply else {
        return;
    };
    status.counts_hidden = true;
    for s in &mut status.shards {
        s.kv_keys = 0;
        s.runs = 0;
        s.workflow_runs = 0;
        s.archived_runs = 0;
        s.run_index_bytes = 0;
        s.executions = 0;
        s.stream_records = 0;
        s.stream_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::FileFormat;
    use flo_protocol::{StatusInfo, Token};

    fn gate() -> Gate {
        let yaml = "tokens:\n  - {token: cli, role: client, namespaces: [payments], name: app}\n";
        Gate::new(Arc::new(AuthTable::parse(yaml, FileFormat::Yaml).unwrap()))
    }

    fn hello(token: Option<&str>) -> Op {
        Op::Hello {
            protocol_version: 1,
            client: "t".into(),
            token: token.map(Token::new),
        }
    }

    fn kv_get(namespace: &str) -> Op {
        Op::KvGet {
            namespace: namespace.into(),
            key: "k".into(),
            wait_ms: None,
            after_version: None,
            newer_than_current: false,
        }
    }

    #[test]
    fn a_status_shows_its_counts_only_to_a_token_for_every_namespace() {
        let yaml = "tokens:\n  - {token: adm, role: admin, namespaces: [\"*\"]}\n  - {token: cli, \
                    role: client, namespaces: [payments]}\n";
        let gate = Gate::new(Arc::new(AuthTable::parse(yaml, FileFormat::Yaml).unwrap()));
        let status = || {
            let shard: flo_protocol::ShardInfo =
                serde_json::from_value(serde_json::json!({"shard": 0, "lsn": 9,
                    "durable_lsn": 9, "segments": 1, "kv_keys": 5, "runs": 3}))
                .unwrap();
            Reply::Status(StatusInfo {
                server_version: "x".into(),
                durability: "sync".into(),
                partitions: 1,
                shards: vec![shard],
                module_cache: None,
                counts_hidden: false,
            })
        };
        let counts = |r: &Reply| match r {
            Reply::Status(s) => (s.counts_hidden, s.shards[0].kv_keys, s.shards[0].lsn),
            _ => unreachable!(),
        };
        let (mut admin, mut client) = (Session::default(), Session::default());
        gate.check(&mut admin, &hello(Some("adm")), 0).unwrap();
        gate.check(&mut client, &hello(Some("cli")), 0).unwrap();
        let mut r = status();
        gate.redact(admin, &mut r);
        assert_eq!(counts(&r), (false, 5, 9));
        let mut r = status();
        gate.redact(client, &mut r);
        assert_eq!(counts(&r), (true, 0, 9), "health stays, counts go");
    }

    #[test]
    fn requests_before_a_valid_handshake_are_refused() {
        let gate = gate();
        let mut session = Session::default();
        let r = gate
            .check(&mut session, &kv_get("payments"), 0)
            .unwrap_err();
        assert_eq!(r.error.code, ErrorCode::Unauthorized);
        let line = r.log_line.unwrap();
        assert_eq!(
            line,
            "unauthorized kv_get in namespace \"payments\" by an \
             unauthenticated connection: no valid token: the connection's handshake must \
             present one"
        );
        assert!(gate.check(&mut session, &hello(None), 0).is_err());
        assert!(gate.check(&mut session, &hello(Some("nope")), 0).is_err());
        assert_eq!(session, Session::Anonymous);
    }

    #[test]
    fn a_valid_handshake_authenticates_the_connection() {
        let gate = gate();
        let mut session = Session::default();
        gate.check(&mut session, &hello(Some("cli")), 0).unwrap();
        assert_eq!(session, Session::Authenticated(0));
        gate.check(&mut session, &kv_get("payments"), 0).unwrap();
        let r = gate.check(&mut session, &kv_get("other"), 0).unwrap_err();
        assert_eq!(
            r.error.message,
            "not authorized: this token does not grant namespace \"other\""
        );
        assert!(r.log_line.unwrap().contains("by app (role client)"));
        // A later handshake with a bad token drops what the first one granted.
        assert!(gate.check(&mut session, &hello(Some("bad")), 0).is_err());
        assert!(gate.check(&mut session, &kv_get("payments"), 0).is_err());
    }

    #[test]
    fn log_lines_never_show_a_token() {
        let gate = gate();
        let mut session = Session::default();
        let r = gate
            .check(&mut session, &hello(Some("cli-typo-secret")), 0)
            .unwrap_err();
        assert!(!r.log_line.unwrap().contains("secret"));
    }
}
