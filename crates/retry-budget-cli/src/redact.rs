//! What the command may show of what the user gave it.

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
