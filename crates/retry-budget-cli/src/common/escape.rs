//! Control characters escaped, so that a message the CLI writes stays one
//! line and cannot move the terminal's cursor. Every usage error and every
//! name or value shown from the command line goes through it.

/// `text` with every control character escaped (`\n`, `\u{1b}`, ...), so
/// that a message stays one line and cannot move the terminal's cursor.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape("a\nb\u{1b}[2Kc\u{7f}"), r"a\nb\u{1b}[2Kc\u{7f}");
        assert_eq!(escape(&escape("a\tb")), r"a\tb");
    }
}
