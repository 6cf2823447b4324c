//! What a console API request says: its query string's parameters and its JSON body, read
//! here so that a malformed one is answered as the API's JSON error, never a panic.

use super::errors::ApiError;
use flo_protocol::{RunStatus, WorkflowRunStatus};
use serde_json::Value;

/// Parameters a query string may carry, beyond which it is refused.
const PARAMS_MAX: usize = 16;
/// The namespace when none is given (the CLI's default).
pub(crate) const NAMESPACE_DEFAULT: &str = "default";

/// A query string's parameters, in order.
#[derive(Debug, Default)]
pub(crate) struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    /// Parses `query` (`a=1&b=x%20y`).
    pub fn parse(query: Option<&str>) -> Result<Params, ApiError> {
        let pairs: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .take(PARAMS_MAX + 1)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        if pairs.len() > PARAMS_MAX {
            return Err(ApiError::bad_request(format!(
                "at most {PARAMS_MAX} query parameters"
            )));
        }
        Ok(Params { pairs })
    }

    /// The value of `name` (the first given), absent when empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// `ns`, or the default namespace.
    pub fn namespace(&self) -> String {
        self.get("ns").unwrap_or(NAMESPACE_DEFAULT).to_string()
    }

    /// A whole number parameter.
    pub fn number<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, ApiError> {
        self.get(name)
            .map(|v| {
                v.parse().map_err(|_| {
                    ApiError::bad_request(format!("{name} must be a whole number, not {v:?}"))
                })
            })
            .transpose()
    }

    /// A yes/no parameter (`true`, `1`; anything else but absent is refused).
    pub fn flag(&self, name: &str) -> Result<bool, ApiError> {
        match self.get(name) {
            None | Some("false" | "0") => Ok(false),
            Some("true" | "1") => Ok(true),
            Some(v) => Err(ApiError::bad_request(format!(
                "{name} must be true or false, not {v:?}"
            ))),
        }
    }

    pub fn run_status(&self) -> Result<Option<RunStatus>, ApiError> {
        self.get("status")
            .map(|s| {
                RunStatus::parse(s).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "status {s:?}: an action run is pending, running, completed, failed, \
                         cancelled or timed_out"
                    ))
                })
            })
            .transpose()
    }

    pub fn workflow_status(&self) -> Result<Option<WorkflowRunStatus>, ApiError> {
        self.get("status")
            .map(|s| {
                WorkflowRunStatus::parse(s).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "status {s:?}: a workflow run is pending, running, waiting, completed, \
                         failed, cancelled or timed_out"
                    ))
                })
            })
            .transpose()
    }
}

/// A request body: a JSON object (an empty body reads as `{}`).
pub(crate) fn json_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(ApiError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!(
            "the body is not valid JSON: {e}"
        ))),
    }
}

/// A text field of a JSON body.
pub(crate) fn text_field<'a>(body: &'a Value, name: &str) -> Result<Option<&'a str>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(ApiError::bad_request(format!("{name} must be a string"))),
    }
}

/// A yes/no field of a JSON body (absent: no).
pub(crate) fn bool_field(body: &Value, name: &str) -> Result<bool, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::bad_request(format!(
            "{name} must be true or false"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_decoded_and_bad_ones_refused_with_a_reason() {
        let p = Params::parse(Some("ns=pay%20ments&limit=20&dead_letter=true&status=")).unwrap();
        assert_eq!(p.namespace(), "pay ments");
        assert_eq!(p.number::<u32>("limit").unwrap(), Some(20));
        assert!(p.flag("dead_letter").unwrap());
        assert_eq!(p.get("status"), None, "an empty value is absent");
        assert!(p.number::<u32>("ns").is_err());
        assert_eq!(Params::parse(None).unwrap().namespace(), "default");
        let many = vec!["a=1"; PARAMS_MAX + 1].join("&");
        assert!(Params::parse(Some(&many)).is_err());
    }

    #[test]
    fn a_body_must_be_a_json_object() {
        assert!(json_body(b"").unwrap().is_object());
        assert!(json_body(br#"{"type":"x"}"#).is_ok());
        assert!(json_body(b"[1]").is_err());
        assert!(json_body(b"{nope").is_err());
        let body = json_body(br#"{"type": 3}"#).unwrap();
        assert!(text_field(&body, "type").is_err());
        assert_eq!(text_field(&body, "reason").unwrap(), None);
        let body = json_body(br#"{"reset_visits": true, "n": 1}"#).unwrap();
        assert!(bool_field(&body, "reset_visits").unwrap());
        assert!(!bool_field(&body, "absent").unwrap());
        assert!(bool_field(&body, "n").is_err());
    }
}
