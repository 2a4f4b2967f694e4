//! What the command may show of what the user gave it: never a secret,
//! never a raw control character.
//!
//! Every usage error goes through [`escape`] (so a message stays one line
//! and cannot drive the terminal), and clap's errors, which may quote any
//! argument, through [`scrub`] first. The typed paths (headers, URLs) never
//! put a secret in a message in the first place: see [`crate::headers`] and
//! [`crate::url`].

use crate::headers::Sensitive;

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

/// `message` with every secret the command line `args` carries replaced by
/// `***`: the values of sensitive headers (`-H 'Authorization: ...'`, and
/// the names given with `--sensitive`), and the password (or lone user
/// name) of a URL's userinfo. For messages written before the arguments
/// are understood (clap's), which may quote any argument.
pub fn scrub(message: &str, args: &[String]) -> String {
    let extra =
        args.iter()
            .enumerate()
            .filter_map(|(i, arg)| match arg.strip_prefix("--sensitive") {
                Some("") => args.get(i + 1).map(String::as_str),
                Some(rest) => rest.strip_prefix('='),
                None => None,
            });
    // A name that is not a header name protects nothing; the others still do.
    let extra = extra.filter(|name| Sensitive::with([*name]).is_ok());
    let sensitive = Sensitive::with(extra).unwrap_or_default();
    let mut secrets: Vec<&str> = Vec::new();
    for arg in args {
        let forms = [
            Some(arg.as_str()),
            arg.strip_prefix("--header="),
            arg.strip_prefix("-H"),
        ];
        for form in forms.into_iter().flatten() {
            if let Some((name, value)) = form.split_once(':') {
                if sensitive.contains_str(name) && !value.trim().is_empty() {
                    secrets.push(value.trim());
                }
            }
        }
        if let Some(secret) = userinfo_secret(arg) {
            secrets.push(secret);
        }
    }
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut text = message.to_owned();
    for secret in secrets {
        text = text.replace(secret, "***");
    }
    text
}

/// The secret part of a URL's userinfo in `arg`: the password, or the
/// whole userinfo when it has none.
fn userinfo_secret(arg: &str) -> Option<&str> {
    let (_, rest) = arg.split_once("://")?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let (userinfo, _) = authority.rsplit_once('@')?;
    let secret = userinfo
        .split_once(':')
        .map_or(userinfo, |(_, password)| password);
    (!secret.is_empty()).then_some(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape("a\nb\u{1b}[2Kc\u{7f}"), r"a\nb\u{1b}[2Kc\u{7f}");
        assert_eq!(escape(&escape("a\tb")), r"a\tb");
    }

    #[test]
    fn secrets_of_the_command_line_are_scrubbed() {
        let line = args(&[
            "retry-budget",
            "get",
            "http://user:pa55@h/",
            "-H",
            "Authorization: Bearer abc.def",
            "--header=Cookie: id=42",
            "-HProxy-Authorization:Basic xyz",
            "--sensitive",
            "X-Key",
            "--sensitive=x-other",
            "X-Key: k3y-value",
            "X-Other: 0th3r",
            "X-Plain: visible",
            "https://TOKEN123@h/",
        ]);
        let message = line.join(" | ");
        let scrubbed = scrub(&message, &line);
        for secret in [
            "pa55",
            "abc.def",
            "id=42",
            "Basic xyz",
            "k3y-value",
            "0th3r",
            "TOKEN123",
        ] {
            assert!(!scrubbed.contains(secret), "{secret} in {scrubbed}");
        }
        for kept in [
            "http://user:***@h/",
            "Authorization: ***",
            "X-Plain: visible",
            "https://***@h/",
        ] {
            assert!(scrubbed.contains(kept), "{kept} not in {scrubbed}");
        }
    }
}
