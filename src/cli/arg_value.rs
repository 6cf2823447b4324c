//! Arguments that carry a value (a JSON input, a result, a payload): given on the command
//! line as is, or `@FILE` for a file's contents, or `-` for standard input (read once:
//! a second `-` in one command is an error). `@@...` is a literal value starting with `@`.
//! A command line holds at most ~128 KiB per argument; files and stdin have no such bound
//! (the server's frame size applies).

use std::io::Read;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes from the command line, a file or stdin (`flo kv put`, `flo stream append`,
/// `flo action invoke`'s input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgBytes(Vec<u8>);

impl Deref for ArgBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// Text (JSON, usually) from the command line, a file or stdin; a file or stdin must hold
/// UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgText(String);

impl Deref for ArgText {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ArgText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl ArgText {
    pub fn into_string(self) -> String {
        self.0
    }
}

/// Whether this process read its standard input for an argument already.
static STDIN_TAKEN: AtomicBool = AtomicBool::new(false);

/// clap's value parser of [`ArgBytes`].
pub fn parse_bytes(arg: &str) -> Result<ArgBytes, String> {
    resolve(arg, &mut StdinOnce).map(ArgBytes)
}

/// clap's value parser of [`ArgText`].
pub fn parse_text(arg: &str) -> Result<ArgText, String> {
    let bytes = resolve(arg, &mut StdinOnce)?;
    String::from_utf8(bytes)
        .map(ArgText)
        .map_err(|_| format!("{} is not UTF-8 text", source_name(arg)))
}

/// Where an argument's value comes from, for messages.
fn source_name(arg: &str) -> String {
    match arg {
        "-" => "standard input".to_string(),
        _ => format!("file {:?}", &arg[1..]),
    }
}

/// Standard input, to be read at most once.
trait Stdin {
    fn read_all(&mut self) -> Result<Vec<u8>, String>;
}

struct StdinOnce;

impl Stdin for StdinOnce {
    fn read_all(&mut self) -> Result<Vec<u8>, String> {
        if STDIN_TAKEN.swap(true, Ordering::Relaxed) {
            return Err(
                "standard input (-) is read once per command: give the other values as text \
                 or @FILE"
                    .to_string(),
            );
        }
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        Ok(bytes)
    }
}

/// The value `arg` stands for: `-` stdin, `@FILE` the file, `@@TEXT` the text `@TEXT`,
/// anything else itself.
fn resolve(arg: &str, stdin: &mut dyn Stdin) -> Result<Vec<u8>, String> {
    if arg == "-" {
        return stdin.read_all();
    }
    let Some(rest) = arg.strip_prefix('@') else {
        return Ok(arg.as_bytes().to_vec());
    };
    if rest.starts_with('@') {
        return Ok(rest.as_bytes().to_vec());
    }
    if rest.is_empty() {
        return Err("@ names no file: give @FILE, or @@ for a value starting with @".to_string());
    }
    std::fs::read(rest).map_err(|e| {
        format!("cannot read file {rest:?}: {e} (a value starting with @ is written @@...)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeStdin(Option<Vec<u8>>);

    impl Stdin for FakeStdin {
        fn read_all(&mut self) -> Result<Vec<u8>, String> {
            self.0.take().ok_or_else(|| "read once".to_string())
        }
    }

    #[test]
    fn text_files_stdin_and_escaped_at_signs() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("input.json");
        std::fs::write(&file, b"{\"big\":true}").unwrap();
        let mut stdin = FakeStdin(Some(b"from stdin".to_vec()));
        let mut resolved = |arg: &str| resolve(arg, &mut stdin);

        assert_eq!(resolved("{\"a\":1}").unwrap(), b"{\"a\":1}");
        assert_eq!(
            resolved(&format!("@{}", file.display())).unwrap(),
            b"{\"big\":true}"
        );
        assert_eq!(resolved("@@handle").unwrap(), b"@handle");
        assert_eq!(resolved("@@").unwrap(), b"@");
        assert_eq!(resolved("-").unwrap(), b"from stdin");
        assert!(resolved("-").is_err(), "stdin is read once");
        let missing = resolved("@/no/such/file.json").unwrap_err();
        assert!(
            missing.contains("cannot read file \"/no/such/file.json\""),
            "{missing}"
        );
        assert!(resolved("@").unwrap_err().contains("names no file"));
    }
}
