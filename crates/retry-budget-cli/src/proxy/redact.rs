//! URLs as they may be logged: no userinfo, and no value of a query
//! parameter whose name says it is a secret.
//!
//! The proxy's own minimal version (to be replaced by the CLI's shared
//! redaction module once it lands: same rule, one place).

use std::fmt;

use http::Uri;

/// Query parameter names (lower case, matched as substrings) whose values
/// are never logged.
const SECRET_PARAMS: [&str; 10] = [
    "token",
    "key",
    "secret",
    "password",
    "passwd",
    "auth",
    "sig",
    "session",
    "credential",
    "code",
];

/// A URI for logs and spans; see the [module docs](self).
pub fn redact_uri(uri: &Uri) -> Redacted<'_> {
    Redacted(uri)
}

/// The [`Display`](fmt::Display) of a redacted URI.
pub struct Redacted<'a>(&'a Uri);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let uri = self.0;
        if let Some(scheme) = uri.scheme_str() {
            write!(f, "{scheme}://")?;
        }
        if let Some(authority) = uri.authority() {
            // `user:password@host:port` → `host:port`.
            let text = authority.as_str();
            let host = text.rsplit_once('@').map_or(text, |(_, host)| host);
            f.write_str(host)?;
        }
        f.write_str(uri.path())?;
        if let Some(query) = uri.query() {
            f.write_str("?")?;
            for (i, pair) in query.split('&').enumerate() {
                if i > 0 {
                    f.write_str("&")?;
                }
                match pair.split_once('=') {
                    Some((name, _)) if is_secret(name) => write!(f, "{name}=REDACTED")?,
                    _ => f.write_str(pair)?,
                }
            }
        }
        Ok(())
    }
}

fn is_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PARAMS.iter().any(|secret| name.contains(secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(text: &str) -> String {
        redact_uri(&text.parse().unwrap()).to_string()
    }

    #[test]
    fn userinfo_and_secret_parameters_are_never_shown() {
        assert_eq!(
            show("https://user:pa55@api.example.com:8443/v1/x?page=2&api_key=s3cr3t&sig=abc"),
            "https://api.example.com:8443/v1/x?page=2&api_key=REDACTED&sig=REDACTED"
        );
        assert_eq!(show("http://a/b"), "http://a/b");
        assert_eq!(show("/only/a/path?q=1"), "/only/a/path?q=1");
        assert_eq!(
            show("http://a/?access_token=t&flag"),
            "http://a/?access_token=REDACTED&flag"
        );
    }
}
