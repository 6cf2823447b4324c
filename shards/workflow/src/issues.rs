//! Codes of validation issues (E1xx–E5xx errors, W1xx warnings; the table is in
//! `validate.rs`) and the constructor both the parser and the validator use.

use flo_protocol::ValidationIssue;
use std::fmt;

/// The code of a [`ValidationIssue`] (table in the module doc); `E` errors, `W` warnings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueCode {
    E100,
    E101,
    E102,
    E103,
    E104,
    E105,
    E106,
    E107,
    E108,
    E109,
    E201,
    E202,
    E203,
    E204,
    E301,
    E302,
    E303,
    E304,
    E305,
    E306,
    E307,
    E308,
    E309,
    E401,
    E402,
    E403,
    E501,
    E502,
    E503,
    E504,
    E505,
    E506,
    E507,
    E508,
    E509,
    E510,
    E511,
    E512,
    E513,
    E514,
    E515,
    W101,
    W102,
    W103,
    W104,
}

impl fmt::Display for IssueCode {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

pub(crate) fn issue(
    code: IssueCode,
    path: impl Into<String>,
    message: impl Into<String>,
) -> ValidationIssue {
    ValidationIssue {
        code: code.to_string(),
        path: path.into(),
        message: message.into(),
    }
}
