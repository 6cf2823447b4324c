//! The run query language of `flo workflow list-runs --query`:
//!
//! ```text
//! status = "running" AND customer_id = "c-1" AND amount > 100 AND started_at > "2026-11-01"
//! tags IN ("vip", "eu") OR NOT (priority <= 2)
//! ```
//!
//! Fields are the run's (`status`, `workflow`, `run_id`, `started_at`, `updated_at`) and its
//! search attributes; operators `=`, `!=`, `<`, `<=`, `>`, `>=`, `IN (…)`; `AND`, `OR`,
//! `NOT` and parentheses (`NOT` binds tightest, then `AND`, then `OR`); values are strings
//! in double or single quotes, numbers, `true` and `false`. Keywords are case-insensitive.
//! A field a run lacks matches no comparison (not even `!=`).

use crate::search::{AttrValue, parse_time};
use std::cmp::Ordering;
use std::fmt;

/// Longest query text.
pub const QUERY_BYTES_MAX: usize = 4096;
/// Deepest nesting of parentheses and `NOT`s.
const QUERY_DEPTH_MAX: usize = 32;
/// Most values an `IN` lists.
const IN_VALUES_MAX: usize = 256;

#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Str(String),
    Num(f64),
    Bool(bool),
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Literal::Str(s) => write!(f, "{s:?}"),
            Literal::Num(n) => write!(f, "{n}"),
            Literal::Bool(b) => write!(f, "{b}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Cmp {
        field: String,
        op: CmpOp,
        value: Literal,
    },
    In {
        field: String,
        values: Vec<Literal>,
    },
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
}

/// A field's value on one run, as a query sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue<'a> {
    Str(&'a str),
    /// Milliseconds since the epoch.
    Time(u64),
    Num(f64),
    Bool(bool),
    Attr(&'a AttrValue),
}

impl Expr {
    /// Every field the query names.
    pub fn fields(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect_fields(&mut out);
        out
    }

    fn collect_fields<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Expr::Cmp { field, .. } | Expr::In { field, .. } => out.push(field),
            Expr::And(a, b) | Expr::Or(a, b) => {
                a.collect_fields(out);
                b.collect_fields(out);
            }
            Expr::Not(a) => a.collect_fields(out),
        }
    }

    /// Whether a run matches; `get` gives a field's value (None: the run lacks it).
    pub fn matches<'a>(&self, get: &impl Fn(&str) -> Option<FieldValue<'a>>) -> bool {
        match self {
            Expr::Cmp { field, op, value } => get(field).is_some_and(|v| compare(&v, *op, value)),
            Expr::In { field, values } => {
                get(field).is_some_and(|v| values.iter().any(|value| compare(&v, CmpOp::Eq, value)))
            }
            Expr::And(a, b) => a.matches(get) && b.matches(get),
            Expr::Or(a, b) => a.matches(get) || b.matches(get),
            Expr::Not(a) => !a.matches(get),
        }
    }

    /// The conjuncts of a chain of `AND`s (the expression itself otherwise).
    pub fn conjuncts(&self) -> Vec<&Expr> {
        match self {
            Expr::And(a, b) => {
                let mut out = a.conjuncts();
                out.extend(b.conjuncts());
                out
            }
            other => vec![other],
        }
    }
}

/// `Ordering` of a field's value against a literal, when they compare.
fn order(v: &FieldValue<'_>, lit: &Literal) -> Option<Ordering> {
    match (v, lit) {
        (FieldValue::Str(s), Literal::Str(l)) => Some((*s).cmp(l.as_str())),
        (FieldValue::Time(t), _) | (FieldValue::Attr(AttrValue::Time(t)), _) => {
            Some(t.cmp(&literal_time(lit)?))
        }
        (FieldValue::Attr(AttrValue::Str(s)), Literal::Str(l)) => Some(s.as_str().cmp(l)),
        (FieldValue::Num(n), Literal::Num(l)) => n.partial_cmp(l),
        (FieldValue::Num(n), Literal::Str(l)) => n.partial_cmp(&l.trim().parse::<f64>().ok()?),
        (FieldValue::Bool(b), Literal::Bool(l)) => Some(b.cmp(l)),
        (FieldValue::Attr(AttrValue::Num(n)), Literal::Num(l)) => n.partial_cmp(l),
        (FieldValue::Attr(AttrValue::Num(n)), Literal::Str(l)) => {
            n.partial_cmp(&l.trim().parse::<f64>().ok()?)
        }
        (FieldValue::Attr(AttrValue::Bool(b)), Literal::Bool(l)) => Some(b.cmp(l)),
        _ => None,
    }
}

/// A literal as a time: an RFC 3339 text or a date, or milliseconds since the epoch.
pub fn literal_time(lit: &Literal) -> Option<u64> {
    match lit {
        Literal::Str(s) => parse_time(s),
        Literal::Num(n) if *n >= 0.0 => Some(*n as u64),
        _ => None,
    }
}

fn compare(v: &FieldValue<'_>, op: CmpOp, lit: &Literal) -> bool {
    // A keyword list equals a value it holds.
    if let FieldValue::Attr(AttrValue::Keywords(words)) = v {
        let Literal::Str(l) = lit else { return false };
        let holds = words.iter().any(|w| w == l);
        return match op {
            CmpOp::Eq => holds,
            CmpOp::Ne => !holds,
            _ => false,
        };
    }
    let Some(o) = order(v, lit) else {
        return false;
    };
    match op {
        CmpOp::Eq => o == Ordering::Equal,
        CmpOp::Ne => o != Ordering::Equal,
        CmpOp::Lt => o == Ordering::Less,
        CmpOp::Le => o != Ordering::Greater,
        CmpOp::Gt => o == Ordering::Greater,
        CmpOp::Ge => o != Ordering::Less,
    }
}

/// A query that does not parse: where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError {
    /// 1-based character position.
    pub column: usize,
    pub message: String,
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "query error at column {}: {}", self.column, self.message)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Num(f64),
    Op(CmpOp),
    LParen,
    RParen,
    Comma,
    End,
}

/// Parses a query.
pub fn parse_query(text: &str) -> Result<Expr, QueryError> {
    if text.len() > QUERY_BYTES_MAX {
        return Err(QueryError {
            column: 1,
            message: format!(
                "the query is {} bytes; at most {QUERY_BYTES_MAX}",
                text.len()
            ),
        });
    }
    let toks = lex(text)?;
    let mut p = Parser { toks, at: 0 };
    let e = p.or(0)?;
    match p.peek() {
        (Tok::End, _) => Ok(e),
        (t, col) => Err(QueryError {
            column: col,
            message: format!("unexpected {}; expected AND, OR or the end", describe(&t)),
        }),
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Str(s) => format!("{s:?}"),
        Tok::Num(n) => format!("`{n}`"),
        Tok::Op(_) => "an operator".to_string(),
        Tok::LParen => "`(`".to_string(),
        Tok::RParen => "`)`".to_string(),
        Tok::Comma => "`,`".to_string(),
        Tok::End => "the end of the query".to_string(),
    }
}

fn lex(text: &str) -> Result<Vec<(Tok, usize)>, QueryError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let tok = match c {
            '(' => Tok::LParen,
            ')' => Tok::RParen,
            ',' => Tok::Comma,
            '=' => Tok::Op(CmpOp::Eq),
            '!' if chars.get(i + 1) == Some(&'=') => {
                i += 1;
                Tok::Op(CmpOp::Ne)
            }
            '<' | '>' => {
                let eq = chars.get(i + 1) == Some(&'=');
                let ne = c == '<' && chars.get(i + 1) == Some(&'>');
                if eq || ne {
                    i += 1;
                }
                Tok::Op(match (c, eq, ne) {
                    (_, _, true) => CmpOp::Ne,
                    ('<', true, _) => CmpOp::Le,
                    ('<', false, _) => CmpOp::Lt,
                    (_, true, _) => CmpOp::Ge,
                    _ => CmpOp::Gt,
                })
            }
            '"' | '\'' => {
                let mut s = String::new();
                let mut j = i + 1;
                loop {
                    match chars.get(j) {
                        None => {
                            return Err(QueryError {
                                column: col,
                                message: "a string that is never closed".to_string(),
                            });
                        }
                        Some('\\') if j + 1 < chars.len() => {
                            s.push(chars[j + 1]);
                            j += 2;
                        }
                        Some(&q) if q == c => break,
                        Some(&ch) => {
                            s.push(ch);
                            j += 1;
                        }
                    }
                }
                i = j;
                Tok::Str(s)
            }
            c if c.is_ascii_digit() || c == '-' || c == '.' => {
                let mut j = i + 1;
                while j < chars.len()
                    && (chars[j].is_ascii_alphanumeric() || matches!(chars[j], '.' | '-' | '+'))
                {
                    j += 1;
                }
                let s: String = chars[i..j].iter().collect();
                let n = s
                    .parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite())
                    .ok_or(QueryError {
                        column: col,
                        message: format!(
                            "`{s}` is not a number (quote text and times: \"2026-11-01\")"
                        ),
                    })?;
                i = j - 1;
                Tok::Num(n)
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let mut j = i + 1;
                // `labels.region`, `labels.gpu-class`: dots and hyphens inside a name.
                while j < chars.len()
                    && (chars[j].is_ascii_alphanumeric() || matches!(chars[j], '_' | '.' | '-'))
                {
                    j += 1;
                }
                let s: String = chars[i..j].iter().collect();
                i = j - 1;
                Tok::Ident(s)
            }
            other => {
                return Err(QueryError {
                    column: col,
                    message: format!("unexpected character {other:?}"),
                });
            }
        };
        out.push((tok, col));
        i += 1;
    }
    out.push((Tok::End, chars.len() + 1));
    Ok(out)
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    at: usize,
}

fn is_kw(t: &Tok, kw: &str) -> bool {
    matches!(t, Tok::Ident(s) if s.eq_ignore_ascii_case(kw))
}

impl Parser {
    fn peek(&self) -> (Tok, usize) {
        self.toks[self.at.min(self.toks.len() - 1)].clone()
    }

    fn next(&mut self) -> (Tok, usize) {
        let t = self.peek();
        self.at += 1;
        t
    }

    fn deep(&self, depth: usize, col: usize) -> Result<(), QueryError> {
        if depth > QUERY_DEPTH_MAX {
            return Err(QueryError {
                column: col,
                message: format!("nested more than {QUERY_DEPTH_MAX} deep"),
            });
        }
        Ok(())
    }

    fn or(&mut self, depth: usize) -> Result<Expr, QueryError> {
        let mut e = self.and(depth)?;
        while is_kw(&self.peek().0, "or") {
            self.next();
            let rhs = self.and(depth)?;
            e = Expr::Or(Box::new(e), Box::new(rhs));
        }
        Ok(e)
    }

    fn and(&mut self, depth: usize) -> Result<Expr, QueryError> {
        let mut e = self.not(depth)?;
        while is_kw(&self.peek().0, "and") {
            self.next();
            let rhs = self.not(depth)?;
            e = Expr::And(Box::new(e), Box::new(rhs));
        }
        Ok(e)
    }

    fn not(&mut self, depth: usize) -> Result<Expr, QueryError> {
        let (t, col) = self.peek();
        self.deep(depth, col)?;
        if is_kw(&t, "not") {
            self.next();
            return Ok(Expr::Not(Box::new(self.not(depth + 1)?)));
        }
        if t == Tok::LParen {
            self.next();
            let e = self.or(depth + 1)?;
            return match self.next() {
                (Tok::RParen, _) => Ok(e),
                (t, col) => Err(QueryError {
                    column: col,
                    message: format!("expected `)`, found {}", describe(&t)),
                }),
            };
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, QueryError> {
        let (t, col) = self.next();
        let field = match t {
            Tok::Ident(s)
                if !["and", "or", "not", "in"]
                    .iter()
                    .any(|k| s.eq_ignore_ascii_case(k)) =>
            {
                s
            }
            t => {
                return Err(QueryError {
                    column: col,
                    message: format!(
                        "expected a field (status, workflow, run_id, started_at, updated_at or a \
                         search attribute), found {}",
                        describe(&t)
                    ),
                });
            }
        };
        let (t, col) = self.next();
        match t {
            Tok::Op(op) => Ok(Expr::Cmp {
                field,
                op,
                value: self.literal()?,
            }),
            t if is_kw(&t, "in") => {
                match self.next() {
                    (Tok::LParen, _) => {}
                    (t, col) => {
                        return Err(QueryError {
                            column: col,
                            message: format!("expected `(` after IN, found {}", describe(&t)),
                        });
                    }
                }
                let mut values = vec![self.literal()?];
                loop {
                    match self.next() {
                        (Tok::Comma, _) => values.push(self.literal()?),
                        (Tok::RParen, _) => break,
                        (t, col) => {
                            return Err(QueryError {
                                column: col,
                                message: format!(
                                    "expected `,` or `)` in an IN list, found {}",
                                    describe(&t)
                                ),
                            });
                        }
                    }
                    if values.len() > IN_VALUES_MAX {
                        return Err(QueryError {
                            column: col,
                            message: format!("an IN list holds at most {IN_VALUES_MAX} values"),
                        });
                    }
                }
                Ok(Expr::In { field, values })
            }
            t => Err(QueryError {
                column: col,
                message: format!(
                    "expected an operator (=, !=, <, <=, >, >=, IN) after `{field}`, found {}",
                    describe(&t)
                ),
            }),
        }
    }

    fn literal(&mut self) -> Result<Literal, QueryError> {
        let (t, col) = self.next();
        Ok(match t {
            Tok::Str(s) => Literal::Str(s),
            Tok::Num(n) => Literal::Num(n),
            t if is_kw(&t, "true") => Literal::Bool(true),
            t if is_kw(&t, "false") => Literal::Bool(false),
            t => {
                return Err(QueryError {
                    column: col,
                    message: format!(
                        "expected a value (\"text\", a number, true or false), found {}",
                        describe(&t)
                    ),
                });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<'a>(attrs: &'a [(&'a str, AttrValue)]) -> impl Fn(&str) -> Option<FieldValue<'a>> {
        move |field| match field {
            "status" => Some(FieldValue::Str("running")),
            "workflow" => Some(FieldValue::Str("orders")),
            "started_at" => Some(FieldValue::Time(1_793_577_600_000)), // 2026-11-02
            f => attrs
                .iter()
                .find(|(n, _)| *n == f)
                .map(|(_, v)| FieldValue::Attr(v)),
        }
    }

    #[test]
    fn queries_parse_and_match() {
        let attrs = [
            ("customer", AttrValue::Str("c-1".into())),
            ("amount", AttrValue::Num(150.0)),
            ("tags", AttrValue::Keywords(vec!["vip".into(), "eu".into()])),
            ("paid", AttrValue::Bool(true)),
        ];
        let get = run(&attrs);
        let yes = |q: &str| parse_query(q).unwrap().matches(&get);
        assert!(yes(
            r#"status = "running" AND customer = "c-1" AND amount > 100 AND started_at > "2026-11-01""#
        ));
        assert!(!yes(r#"status = "running" AND amount > 200"#));
        assert!(yes(r#"amount > 200 OR customer = 'c-1'"#));
        assert!(yes(r#"NOT (amount <= 100) and paid = true"#));
        assert!(yes(
            r#"tags = "vip" AND tags IN ("x", "eu") AND tags != "us""#
        ));
        assert!(yes(
            r#"status IN ("running", "waiting") AND started_at <= 1793577600000"#
        ));
        assert!(yes(r#"amount >= 150 AND amount <= 150 AND amount != 151"#));
        // A field the run lacks matches nothing, not even `!=`.
        assert!(!yes(r#"region != "eu""#));
        assert!(yes(r#"NOT region = "eu""#));
        let e = parse_query(r#"a = 1 AND (b = 2 OR c = 3)"#).unwrap();
        assert_eq!(e.fields(), ["a", "b", "c"]);
        assert_eq!(e.conjuncts().len(), 2);
    }

    #[test]
    fn bad_queries_say_where_and_why() {
        let err = |q: &str| parse_query(q).unwrap_err();
        let e = err(r#"status = "running" AND"#);
        assert_eq!(e.column, 23, "{e}");
        assert!(e.message.contains("expected a field"), "{e}");
        assert!(err("amount >").message.contains("expected a value"));
        assert!(err("amount 5").message.contains("expected an operator"));
        assert!(err(r#"a = "x"#).message.contains("never closed"));
        assert!(err("(a = 1").message.contains("expected `)`"));
        assert!(err("a = 1 b = 2").message.contains("expected AND, OR"));
        assert!(err("a IN 1").message.contains("expected `(`"));
        assert!(err("a = 2026-11-01").message.contains("not a number"));
        assert!(err("a ~ 1").message.contains("unexpected character"));
        assert!(err(&"NOT ".repeat(40)).message.contains("nested"));
        assert!(err(&"x".repeat(5000)).message.contains("at most"));
    }
}
