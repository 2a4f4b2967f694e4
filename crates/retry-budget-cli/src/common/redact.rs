//! What the command may show of what the user gave it, and what the proxy
//! may log of what it forwards: never a secret, never a raw control
//! character.
//!
//! Every usage error goes through [`escape`] (so a message stays one line
//! and cannot drive the terminal), and clap's errors, which may quote any
//! argument, through [`scrub`] first. The typed paths (headers, URLs) never
//! put a secret in a message in the first place: see [`crate::common::headers`] and
//! [`crate::common::url`].
//!
//! A URL has two rules, because two readers see it:
//!
//! | function | reader | userinfo | query |
//! |---|---|---|---|
//! | [`shown_uri`] | the person who typed it (`get`'s first line) | `user:***@`, a lone user name (often a token) `***@`: they see which credentials were sent | as typed |
//! | [`logged_uri`] | whoever reads the proxy's logs and spans | removed | the value of a parameter whose name, percent-decoded, says it is a secret (`api_key`, `token`, `sig`, `jwt`, `pwd`, ...) is `REDACTED`; parameters are split on `&` and `;` |

use std::fmt;

use http::Uri;

use super::escape::escape;
use super::headers::Sensitive;

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

/// The secret part of a URL's userinfo in `arg`.
fn userinfo_secret(arg: &str) -> Option<&str> {
    let (_, rest) = arg.split_once("://")?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let (userinfo, _) = split_userinfo(authority)?;
    let (_, secret) = user_and_secret(userinfo);
    (!secret.is_empty()).then_some(secret)
}

/// An authority's userinfo and the rest (`user:pw@host:port` → `user:pw`,
/// `host:port`), if it has userinfo.
fn split_userinfo(authority: &str) -> Option<(&str, &str)> {
    // A byte search: `@` is ASCII, so its byte is never inside another
    // character, and a log line splits one authority per request.
    let at = authority.bytes().rposition(|b| b == b'@')?;
    Some((authority.get(..at)?, authority.get(at + 1..)?))
}

/// The user name that may be shown, and the secret, of a userinfo: the
/// password, or the whole userinfo when it has none (a lone user name is
/// often a token).
fn user_and_secret(userinfo: &str) -> (Option<&str>, &str) {
    match userinfo.split_once(':') {
        Some((user, password)) => (Some(user), password),
        None => (None, userinfo),
    }
}

/// The URL as shown to the person who gave it: the password replaced by
/// `***`, a lone user name too; control characters escaped.
pub fn shown_uri(uri: &Uri) -> String {
    let text = uri.to_string();
    let Some(authority) = uri.authority() else {
        return escape(&text);
    };
    let Some((userinfo, host_port)) = split_userinfo(authority.as_str()) else {
        return escape(&text);
    };
    let hidden = match user_and_secret(userinfo) {
        (Some(user), _) => format!("{user}:***@{host_port}"),
        (None, _) => format!("***@{host_port}"),
    };
    escape(&text.replacen(authority.as_str(), &hidden, 1))
}

/// Query parameter names (lower case, matched as substrings of the
/// percent-decoded name) whose values are never logged. `pass` covers
/// `password`, `passwd` and `passphrase`; `key` covers `private_key` and
/// `api_key`; `token` covers `refresh_token`.
const SECRET_PARAMS: [&str; 16] = [
    "token",
    "key",
    "secret",
    "pass",
    "pwd",
    "auth",
    "sig",
    "session",
    "credential",
    "code",
    "jwt",
    "bearer",
    "otp",
    "assertion",
    "cookie",
    "nonce",
];

/// A URI for logs and spans: no userinfo, no value of a secret-looking
/// query parameter (see the [module docs](self)).
pub const fn logged_uri(uri: &Uri) -> LoggedUri<'_> {
    LoggedUri(uri)
}

/// The [`Display`](fmt::Display) of [`logged_uri`].
pub struct LoggedUri<'a>(&'a Uri);

impl fmt::Display for LoggedUri<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_to(f)
    }
}

impl LoggedUri<'_> {
    /// Writes it to `f` piece by piece (into a `String`, with no
    /// formatting machinery: a log line is written per request).
    pub fn write_to(&self, f: &mut impl fmt::Write) -> fmt::Result {
        let uri = self.0;
        if let Some(scheme) = uri.scheme_str() {
            f.write_str(scheme)?;
            f.write_str("://")?;
        }
        if let Some(authority) = uri.authority() {
            let text = authority.as_str();
            let host = split_userinfo(text).map_or(text, |(_, host)| host);
            f.write_str(host)?;
        }
        f.write_str(uri.path())?;
        if let Some(query) = uri.query() {
            f.write_str("?")?;
            // Split on `&` and on `;` (which some servers also take as a
            // separator), keeping each separator as written.
            let mut rest = query;
            loop {
                let end = rest.find(['&', ';']).unwrap_or(rest.len());
                let pair = &rest[..end];
                match pair.split_once('=') {
                    Some((name, _)) if is_secret_param(name) => {
                        f.write_str(name)?;
                        f.write_str("=REDACTED")?;
                    }
                    _ => f.write_str(pair)?,
                }
                let Some(separator) = rest[end..].chars().next() else {
                    break;
                };
                f.write_char(separator)?;
                rest = &rest[end + 1..];
            }
        }
        Ok(())
    }
}

/// Whether a parameter name, as a server reads it (percent-decoded, `+`
/// as a space, any case), looks like a secret's.
fn is_secret_param(name: &str) -> bool {
    let name = name.replace('+', " ");
    let decoded = percent_encoding::percent_decode_str(&name).decode_utf8_lossy();
    let name = decoded.to_lowercase();
    SECRET_PARAMS.iter().any(|secret| name.contains(secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn logged(text: &str) -> String {
        logged_uri(&text.parse().unwrap()).to_string()
    }

    fn shown(text: &str) -> String {
        shown_uri(&text.parse().unwrap())
    }

    #[test]
    fn a_person_sees_the_user_name_and_the_whole_query() {
        assert_eq!(
            shown("http://alice:s3cret@127.0.0.1:8080/x?q=1"),
            "http://alice:***@127.0.0.1:8080/x?q=1"
        );
        assert_eq!(shown("https://TOKEN@h/"), "https://***@h/");
        assert_eq!(shown("http://h:8/p?api_key=k"), "http://h:8/p?api_key=k");
        assert_eq!(shown("/only/a/path"), "/only/a/path");
    }

    #[test]
    fn a_log_sees_no_userinfo_and_no_secret_parameter() {
        assert_eq!(
            logged("https://user:pa55@api.example.com:8443/v1/x?page=2&api_key=s3cr3t&sig=abc"),
            "https://api.example.com:8443/v1/x?page=2&api_key=REDACTED&sig=REDACTED"
        );
        assert_eq!(logged("https://TOKEN@h/"), "https://h/");
        assert_eq!(logged("http://a/b"), "http://a/b");
        assert_eq!(logged("/only/a/path?q=1"), "/only/a/path?q=1");
        assert_eq!(
            logged("http://a/?access_token=t&flag"),
            "http://a/?access_token=REDACTED&flag"
        );
    }

    #[test]
    fn secret_names_are_matched_as_a_server_reads_them() {
        // (query as sent, what the log shows)
        for (query, shown) in [
            ("t%6Fken=S", "t%6Fken=REDACTED"),
            ("%74%6F%6B%65%6E=S", "%74%6F%6B%65%6E=REDACTED"),
            ("TOKEN=S", "TOKEN=REDACTED"),
            ("a=1;token=S", "a=1;token=REDACTED"),
            ("a=1;b=2&sig=S;c=3", "a=1;b=2&sig=REDACTED;c=3"),
            ("jwt=S", "jwt=REDACTED"),
            ("id_jwt=S", "id_jwt=REDACTED"),
            ("bearer=S", "bearer=REDACTED"),
            ("pwd=S", "pwd=REDACTED"),
            ("pass=S", "pass=REDACTED"),
            ("passphrase=S", "passphrase=REDACTED"),
            ("otp=S", "otp=REDACTED"),
            ("totp=S", "totp=REDACTED"),
            ("assertion=S", "assertion=REDACTED"),
            ("client_assertion=S", "client_assertion=REDACTED"),
            ("password=S", "password=REDACTED"),
            ("refresh_token=S", "refresh_token=REDACTED"),
            ("private_key=S", "private_key=REDACTED"),
            ("session=S", "session=REDACTED"),
            ("SessionId=S", "SessionId=REDACTED"),
            ("p%61ss=S", "p%61ss=REDACTED"),
            ("api+key=S", "api+key=REDACTED"),
            ("api%5Fkey=S", "api%5Fkey=REDACTED"),
            ("page=2&q=rust", "page=2&q=rust"),
            ("flag;x", "flag;x"),
            ("%ff%fe=1", "%ff%fe=1"),
            ("", ""),
            ("a=1&", "a=1&"),
        ] {
            assert_eq!(
                logged(&format!("http://a/p?{query}")),
                format!("http://a/p?{shown}"),
                "{query}"
            );
        }
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
