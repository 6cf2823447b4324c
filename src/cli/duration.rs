//! Durations on the command line: `500ms`, `1s`, `5m`, `2h`, `1d`, or milliseconds.

/// `--ttl`: `500ms`, `1s`, `5m`, `2h`, `1d` (humantime units), or a bare number of
/// milliseconds (0: no expiry).
pub fn parse_ttl(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let ms = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        text.parse::<u64>()
            .map_err(|e| format!("{text:?} is not a number of milliseconds: {e}"))?
    } else {
        let d = humantime::parse_duration(text).map_err(|e| {
            format!("{text:?} is not a duration ({e}): use e.g. 500ms, 1s, 5m, or milliseconds")
        })?;
        u64::try_from(d.as_millis()).map_err(|_| format!("{text:?} is too long"))?
    };
    if ms > i64::MAX as u64 {
        return Err(format!("{text:?} is too long: at most {} ms", i64::MAX));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;

    #[test]
    fn ttl_takes_durations_and_bare_milliseconds() {
        assert_eq!(parse_ttl("500ms"), Ok(500));
        assert_eq!(parse_ttl("1s"), Ok(1000));
        assert_eq!(parse_ttl("5m"), Ok(300_000));
        assert_eq!(parse_ttl("2h"), Ok(7_200_000));
        assert_eq!(parse_ttl("1500"), Ok(1500));
        assert_eq!(parse_ttl("0"), Ok(0));
        assert_eq!(parse_ttl("0s"), Ok(0));
        assert!(parse_ttl("soon").is_err());
        assert!(parse_ttl("-5").is_err());
        assert!(parse_ttl("99999999999999999999").is_err());
    }
}
