//! Step filters (`when:`, `whenAll:`, `whenAny:`): Common Expression Language expressions
//! over the run (`input`, `steps.<name>.output`, `state`, `now`), checked when the
//! definition is created and evaluated when the step becomes ready. A step whose filter is
//! false is `filtered` (it does not run).

use cel_interpreter::{Context, Program, Value as Cel};
use serde_json::Value;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

thread_local! {
    /// Set while the CEL library runs: a panic in it (it divides by zero as Rust does,
    /// for one) is caught and made an error, not the process's end.
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
}

/// Whether a panic now is one the filter catches (the server's fail-stop panic hook lets
/// these unwind to it).
pub fn panic_contained() -> bool {
    CONTAINED.with(Cell::get)
}

/// `f`, a panic in it an error.
fn contained<T>(what: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    CONTAINED.with(|c| c.set(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(false));
    result.unwrap_or_else(|panic| {
        let cause = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        Err(format!("{what} failed: {cause}"))
    })
}

/// The longest expression; with `FILTER_NESTING_MAX`, what keeps the parser (which
/// recurses per bracket) within a shard thread's stack.
pub const FILTER_BYTES_MAX: usize = 1024;
/// Deepest nesting of brackets and parentheses in an expression.
pub const FILTER_NESTING_MAX: usize = 32;
/// Most expressions of one step (`when` and both lists).
pub const FILTERS_MAX: usize = 16;

/// A step's filter: `when` and every `all` must hold, and one of `any` if it has some.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct StepFilter {
    pub when: Option<String>,
    pub all: Vec<String>,
    pub any: Vec<String>,
}

/// Why `expr` cannot be a filter (too long, nested too deep, not CEL: with the line and
/// column the parser names), if so.
pub fn check(expr: &str) -> Result<(), String> {
    if expr.trim().is_empty() {
        return Err("an empty expression".into());
    }
    if expr.len() > FILTER_BYTES_MAX {
        return Err(format!(
            "{} bytes; an expression is at most {FILTER_BYTES_MAX}",
            expr.len()
        ));
    }
    let mut depth = 0usize;
    for c in expr.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                if depth > FILTER_NESTING_MAX {
                    return Err(format!("brackets nest more than {FILTER_NESTING_MAX} deep"));
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    contained("parsing", || {
        Program::compile(expr)
            .map(|_| ())
            .map_err(|e| match &e.span.start {
                Some(at) => format!("line {}, column {}: {}", at.line + 1, at.column + 1, e.msg),
                None => e.msg.clone(),
            })
    })
}

impl StepFilter {
    /// Whether the step runs, given `ctx` (an object of `input`, `steps`, `state`, `now`);
    /// an expression that does not evaluate to a bool is an error.
    pub fn passes(&self, ctx: &Value) -> Result<bool, String> {
        contained("the filter", || self.evaluate(ctx))
    }

    fn evaluate(&self, ctx: &Value) -> Result<bool, String> {
        let mut context = Context::default();
        if let Value::Object(fields) = ctx {
            for (name, value) in fields {
                context
                    .add_variable(name.as_str(), value.clone())
                    .map_err(|e| format!("`{name}` cannot be given to the filter: {e}"))?;
            }
        }
        let eval = |expr: &String| -> Result<bool, String> {
            let program = Program::compile(expr).map_err(|e| format!("`{expr}`: {e}"))?;
            match program.execute(&context) {
                Ok(Cel::Bool(b)) => Ok(b),
                Ok(other) => Err(format!("`{expr}` gave {other:?}, not true or false")),
                Err(e) => Err(format!("`{expr}`: {e}")),
            }
        };
        if let Some(when) = &self.when
            && !eval(when)?
        {
            return Ok(false);
        }
        for expr in &self.all {
            if !eval(expr)? {
                return Ok(false);
            }
        }
        if self.any.is_empty() {
            return Ok(true);
        }
        for expr in &self.any {
            if eval(expr)? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn filters_read_the_run_and_combine() {
        let ctx = json!({
            "input": {"emails": ["a@x"], "amount": 12},
            "steps": {"ocr": {"output": {"confidence": 0.95}}},
            "state": {"approval": "approved"},
            "now": 1000,
        });
        let f = |when: Option<&str>, all: &[&str], any: &[&str]| StepFilter {
            when: when.map(str::to_string),
            all: all.iter().map(|s| s.to_string()).collect(),
            any: any.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(
            f(Some("size(input.emails) > 0"), &[], &[]).passes(&ctx),
            Ok(true)
        );
        assert_eq!(
            f(
                None,
                &[
                    "steps.ocr.output.confidence > 0.9",
                    "state.approval == 'approved'"
                ],
                &[]
            )
            .passes(&ctx),
            Ok(true)
        );
        assert_eq!(
            f(None, &["input.amount > 100"], &[]).passes(&ctx),
            Ok(false)
        );
        assert_eq!(
            f(None, &[], &["input.amount > 100", "now >= 1000"]).passes(&ctx),
            Ok(true)
        );
        assert_eq!(
            f(None, &[], &["input.amount > 100"]).passes(&ctx),
            Ok(false)
        );
        // Not a bool, or a name that is not there: errors.
        assert!(f(Some("input.amount"), &[], &[]).passes(&ctx).is_err());
        assert!(f(Some("nothing.here > 1"), &[], &[]).passes(&ctx).is_err());
    }

    #[test]
    fn hostile_expressions_are_errors_not_panics() {
        let ctx = json!({"input": {"list": [1, 2]}, "now": 1});
        for expr in [
            "1 / 0 == 1",
            "1 % 0 == 1",
            "9223372036854775807 + 1 > 0",
            "-9223372036854775808 - 1 < 0",
            "input.list[5] == 1",
            "input.list[-1] == 1",
            "'a' * 3 == 'aaa'",
            "size(input) > 0 && input.list.all(x, x > 0)",
            "int('nope') == 1",
            "input.list.map(x, x / 0).size() == 2",
            "matches('a', '(') == true",
            "timestamp('bad') > now",
        ] {
            assert!(check(expr).is_ok() || check(expr).is_err());
            let f = StepFilter {
                when: Some(expr.to_string()),
                ..StepFilter::default()
            };
            let _ = f.passes(&ctx);
        }
        let f = StepFilter {
            when: Some("1 / 0 == 1".into()),
            ..StepFilter::default()
        };
        let err = f.passes(&ctx).unwrap_err();
        assert!(err.contains("divide by zero"), "{err}");
        assert!(!panic_contained());
    }

    #[test]
    fn bad_expressions_say_where() {
        let err = check("input.amount >").unwrap_err();
        assert!(err.contains("line 1"), "{err}");
        assert!(check(&"(".repeat(40)).unwrap_err().contains("nest"));
        assert!(check(&"a".repeat(2000)).unwrap_err().contains("bytes"));
        assert!(check(" ").is_err());
        assert_eq!(check("input.amount > 10 && size(input.emails) > 0"), Ok(()));
    }
}
