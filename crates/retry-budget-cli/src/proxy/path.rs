//! The path sent upstream: the caller's path with its dot-segments removed
//! (RFC 3986 §5.2.4), `%2e` counted as `.`, before it is joined to the
//! upstream's prefix, so that no request reaches the upstream outside the
//! prefix (`--upstream http://host/v1`: `/../admin` is sent as
//! `/v1/admin`, never `/v1/../admin`).
//!
//! A segment that hides a dot-segment behind an encoded slash or a
//! backslash (`..%2fadmin`, `..\admin`), which some servers decode before
//! they resolve dots, is refused rather than guessed at. Everything else
//! (encoded slashes in ordinary segments, empty segments, the query) is
//! sent as the caller wrote it.
//!
//! Hand-written: `http` and hyper keep a path as received, and
//! tower-http's `NormalizePath` only trims slashes.

use std::borrow::Cow;

/// Why a path cannot be sent upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    /// Not an absolute path (`*`, or a path without its leading `/`).
    NotAbsolute,
    /// A segment holds a dot-segment behind an encoded slash or a
    /// backslash.
    HiddenDotSegment,
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotAbsolute => "the request target is not an absolute path",
            Self::HiddenDotSegment => {
                "the path hides a dot-segment behind an encoded slash or a backslash"
            }
        })
    }
}

impl std::error::Error for PathError {}

/// `.` or `..`, with `%2e` (either case) counted as `.`.
fn dots(segment: &str) -> Option<usize> {
    // One or two `.` or `%2e`: 1 to 6 bytes, the first `.` or `%`. Any
    // other segment (most of them) is none, without a decoded copy.
    if segment.len() > 6 || !segment.starts_with(['.', '%']) {
        return None;
    }
    let decoded = replace_ignore_case(segment, "%2e", ".");
    match decoded.as_str() {
        "." => Some(1),
        ".." => Some(2),
        _ => None,
    }
}

/// `text` with every ASCII-case-insensitive `from` replaced by `to`.
fn replace_ignore_case(text: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.to_ascii_lowercase().find(from) {
        out.push_str(&rest[..at]);
        out.push_str(to);
        rest = &rest[at + from.len()..];
    }
    out.push_str(rest);
    out
}

/// Whether a segment, with `%2e`, `%2f` and `%5c` decoded, holds a `.` or
/// `..` between slashes or backslashes.
fn hides_dots(segment: &str) -> bool {
    // Nothing encoded and no backslash: nothing hidden (most segments).
    if !segment.contains(['%', '\\']) {
        return false;
    }
    let lower = segment.to_ascii_lowercase();
    if !(lower.contains("%2f") || lower.contains("%5c") || lower.contains('\\')) {
        return false;
    }
    let decoded = replace_ignore_case(
        &replace_ignore_case(&replace_ignore_case(segment, "%2e", "."), "%2f", "/"),
        "%5c",
        "\\",
    );
    decoded
        .split(['/', '\\'])
        .any(|part| part == "." || part == "..")
}

/// `path` (an absolute path, no query) with its dot-segments removed; a
/// `..` at the root stays at the root.
///
/// # Errors
///
/// See [`PathError`].
pub fn normalize(path: &str) -> Result<Cow<'_, str>, PathError> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(PathError::NotAbsolute);
    };
    // No `.`, `%` or backslash at all: no segment is or hides a dot-segment
    // (most paths), found in one pass over the bytes.
    if !rest.bytes().any(|b| matches!(b, b'.' | b'%' | b'\\')) {
        return Ok(Cow::Borrowed(path));
    }
    // No dot-segment: the path is its own normal form, given back as it is.
    let mut has_dots = false;
    for segment in rest.split('/') {
        if dots(segment).is_some() {
            has_dots = true;
            break;
        }
        if hides_dots(segment) {
            return Err(PathError::HiddenDotSegment);
        }
    }
    if !has_dots {
        return Ok(Cow::Borrowed(path));
    }
    let mut kept: Vec<&str> = Vec::new();
    // A path that ends in a dot-segment ends in a slash (`/a/b/..` is `/a/`).
    let mut trailing_slash = false;
    for segment in rest.split('/') {
        match dots(segment) {
            Some(1) => trailing_slash = true,
            Some(_) => {
                kept.pop();
                trailing_slash = true;
            }
            None => {
                if hides_dots(segment) {
                    return Err(PathError::HiddenDotSegment);
                }
                kept.push(segment);
                trailing_slash = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    for segment in &kept {
        out.push('/');
        out.push_str(segment);
    }
    if out.is_empty() || trailing_slash {
        out.push('/');
    }
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_are_removed_and_never_climb_above_the_root() {
        for (given, sent) in [
            ("/", "/"),
            ("/a/b", "/a/b"),
            ("/a/b/", "/a/b/"),
            ("/../admin", "/admin"),
            ("/v1/../../admin", "/admin"),
            ("/%2e%2e/admin", "/admin"),
            ("/%2E%2e/admin", "/admin"),
            ("/.%2E/.%2e/admin", "/admin"),
            ("/a/./b", "/a/b"),
            ("/a/%2e/b", "/a/b"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/..", "/"),
            ("/a//b", "/a//b"),
            ("/a/..b/c.", "/a/..b/c."),
            ("/a/%2e%2e%2e", "/a/%2e%2e%2e"),
            ("/groups/a%2Fb/items", "/groups/a%2Fb/items"),
        ] {
            assert_eq!(normalize(given).as_deref(), Ok(sent), "{given}");
        }
    }

    #[test]
    fn hidden_dot_segments_and_non_paths_are_refused() {
        for given in [
            "/..%2fadmin",
            "/..%2Fadmin",
            "/%2e%2e%2fadmin",
            "/a%2f..%2fadmin",
            "/..%5cadmin",
            "/..\\admin",
            "/x/.%2f",
        ] {
            assert_eq!(
                normalize(given),
                Err(PathError::HiddenDotSegment),
                "{given}"
            );
        }
        assert!(matches!(
            normalize("/a/b%2Fc/"),
            Ok(Cow::Borrowed("/a/b%2Fc/"))
        ));
        assert!(matches!(normalize("/a/../b"), Ok(Cow::Owned(_))));
        assert_eq!(normalize("*"), Err(PathError::NotAbsolute));
        assert_eq!(normalize("a/b"), Err(PathError::NotAbsolute));
    }
}
