//! One line per action on stderr: method, redacted URL, outcome, attempts,
//! elapsed time, last status and, for a relayed upstream response, how its
//! body ended, as `key=value` text or one JSON object. The line of a
//! relayed response is written when its body ends, not when its head is
//! relayed.
//!
//! A worker thread keeps its lines in a buffer of its own
//! ([`buffer_this_thread`]) and writes them in one `write` when its runtime
//! has nothing else to do ([`flush_this_thread`], from the runtime's park
//! hook) or when the buffer passes [`FLUSH_AT`]: one system call and one
//! take of the stderr lock per batch rather than per request. A thread
//! without a buffer writes each line at once.
//!
//! Built from the action's [`Report`] only: no header is ever logged, so
//! no secret header can be, and the URL goes through
//! [`logged_uri`](crate::common::redact::logged_uri).

use std::cell::RefCell;
use std::io::Write;
use std::time::{Duration, SystemTime};

use http::{Method, Uri};
use retry_budget::Report;

use super::args::LogFormat;
use super::relay_body::Ending;
use crate::common::redact::logged_uri;

/// What one line says.
#[derive(Debug, Clone)]
pub struct ActionLine<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The upstream URL (redacted when written).
    pub url: &'a Uri,
    /// The config file's route that took it (none for the flags' one).
    pub route: Option<&'a str>,
    /// How the action ended: the core's outcome, or the proxy's own
    /// (`bad_request_body`, `invalid_upstream_status`).
    pub outcome: &'static str,
    /// Attempts sent.
    pub attempts: u32,
    /// Time since the proxy received the request.
    pub elapsed: Duration,
    /// The last status the upstream answered, if any.
    pub last_status: Option<u16>,
    /// Why the action was forwarded once without retries, if it was.
    pub once: Option<&'static str>,
    /// How the relayed response body ended, if an upstream body was
    /// relayed.
    pub body: Option<Ending>,
}

impl<'a> ActionLine<'a> {
    /// The line of an action that ended with `report`.
    pub fn of_report(
        method: &'a Method,
        url: &'a Uri,
        report: &Report,
        elapsed: Duration,
        (once, route): (Option<&'static str>, Option<&'a str>),
    ) -> Self {
        Self {
            method,
            url,
            route,
            outcome: report.outcome.as_str(),
            attempts: report.attempts_started,
            elapsed,
            last_status: report.last_status,
            once,
            body: None,
        }
    }

    /// The line, without its newline.
    pub fn render(&self, format: LogFormat) -> String {
        let mut line = String::with_capacity(160);
        self.render_to(format, &mut line);
        line
    }

    /// Appends the line, without its newline, to `line`.
    fn render_to(&self, format: LogFormat, line: &mut String) {
        let now = SystemTime::now();
        match format {
            LogFormat::Json => self.render_json(now, line),
            LogFormat::Text => self.render_text(now, line),
        }
    }

    /// The line as one JSON object.
    fn render_json(&self, now: SystemTime, line: &mut String) {
        use std::fmt::Write as _;
        let elapsed_s = (self.elapsed.as_secs_f64() * 1000.0).round() / 1000.0;
        let mut json = serde_json::json!({
            "time": humantime::format_rfc3339_millis(now).to_string(),
            "method": self.method.as_str(),
            "url": logged_uri(self.url).to_string(),
            "outcome": self.outcome,
            "attempts": self.attempts,
            "elapsed_s": elapsed_s,
            "last_status": self.last_status,
        });
        if let Some(map) = json.as_object_mut() {
            if let Some(route) = self.route {
                map.insert("route".into(), route.into());
            }
            if let Some(once) = self.once {
                map.insert("forwarded_once".into(), once.into());
            }
            if let Some(body) = self.body {
                map.insert("body".into(), body.as_str().into());
            }
        }
        let _ = write!(line, "{json}");
    }

    /// The line as `key=value` text, written in place, with `fmt` only for
    /// the URL: no string per field, and numbers through `itoa` (a
    /// `String`'s `fmt::Write` cannot fail).
    fn render_text(&self, now: SystemTime, line: &mut String) {
        push_time(line, now);
        line.push(' ');
        line.push_str(self.method.as_str());
        line.push(' ');
        let _ = logged_uri(self.url).write_to(line);
        if let Some(route) = self.route {
            line.push_str(" route=");
            line.push_str(route);
        }
        line.push_str(" outcome=");
        line.push_str(self.outcome);
        line.push_str(" attempts=");
        line.push_str(itoa::Buffer::new().format(self.attempts));
        line.push_str(" elapsed=");
        push_seconds(line, self.elapsed);
        line.push('s');
        if let Some(body) = self.body {
            line.push_str(" body=");
            line.push_str(body.as_str());
        }
        match self.last_status {
            Some(status) => {
                line.push_str(" last_status=");
                line.push_str(itoa::Buffer::new().format(status));
            }
            None => line.push_str(" last_status=none"),
        }
        if let Some(once) = self.once {
            line.push_str(" forwarded_once=");
            line.push_str(once);
        }
    }

    /// Writes the line to stderr, through this thread's buffer if it has
    /// one (a closed stderr is not worth failing a request for).
    pub fn write(&self, format: LogFormat) {
        let full = BUFFER.with(|buffer| {
            let mut buffer = buffer.try_borrow_mut().ok()?;
            let lines = buffer.as_mut()?;
            self.render_to(format, lines);
            lines.push('\n');
            Some(lines.len() >= FLUSH_AT)
        });
        match full {
            Some(true) => flush_this_thread(),
            Some(false) => {}
            None => {
                let mut line = self.render(format);
                line.push('\n');
                let _ = std::io::stderr().lock().write_all(line.as_bytes());
            }
        }
    }
}

/// Appends `now` as RFC 3339 in UTC with milliseconds, as
/// `humantime::format_rfc3339_millis` writes it. `humantime` writes the
/// date and time of day once per second per thread; the milliseconds are
/// added here (caching a second's text is not something `humantime` does).
fn push_time(line: &mut String, now: SystemTime) {
    let since_epoch = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let second = since_epoch.as_secs();
    SECOND.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != Some(second) {
            // "YYYY-MM-DDTHH:MM:SSZ": the text up to the seconds is kept.
            // A clock before 1970 is written as 1970 (`humantime` would
            // panic on it).
            let whole = SystemTime::UNIX_EPOCH
                .checked_add(Duration::from_secs(second))
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let mut text = humantime::format_rfc3339_seconds(whole).to_string();
            text.pop();
            *cached = (Some(second), text);
        }
        line.push_str(&cached.1);
    });
    let millis = since_epoch.subsec_millis();
    line.push('.');
    push_padded(line, millis);
    line.push('Z');
}

/// Appends `n` (under 1000) with three digits.
fn push_padded(line: &mut String, n: u32) {
    let digits = [n / 100 % 10, n / 10 % 10, n % 10];
    line.extend(digits.iter().filter_map(|d| char::from_digit(*d, 10)));
}

/// Appends `elapsed` in seconds rounded to the millisecond, written as the
/// shortest decimal (`0.001`, `1.2`, `3`), as `f64`'s `Display` writes it.
fn push_seconds(line: &mut String, elapsed: Duration) {
    // Whole seconds and rounded milliseconds, in `u64` and `u32` (no
    // 128-bit division); a fraction rounded up to 1000 carries.
    let nanos = elapsed.subsec_nanos();
    let mut seconds = elapsed.as_secs();
    let mut fraction = nanos / 1_000_000 + u32::from(nanos % 1_000_000 >= 500_000);
    if fraction == 1000 {
        seconds = seconds.saturating_add(1);
        fraction = 0;
    }
    line.push_str(itoa::Buffer::new().format(seconds));
    if fraction != 0 {
        let digits = [fraction / 100, fraction / 10 % 10, fraction % 10];
        let shown = if digits[2] != 0 {
            3
        } else if digits[1] != 0 {
            2
        } else {
            1
        };
        line.push('.');
        line.extend(
            digits[..shown]
                .iter()
                .filter_map(|d| char::from_digit(*d, 10)),
        );
    }
}

/// A thread's buffer is written once it holds this many bytes.
pub const FLUSH_AT: usize = 16 * 1024;

thread_local! {
    /// This thread's lines not yet written, if it buffers them.
    static BUFFER: RefCell<Option<String>> = const { RefCell::new(None) };
    /// The whole second last written by [`push_time`], and its text up to
    /// the seconds.
    static SECOND: RefCell<(Option<u64>, String)> = const { RefCell::new((None, String::new())) };
}

/// From now on this thread's lines are buffered until
/// [`flush_this_thread`] (or until the buffer passes [`FLUSH_AT`]).
pub fn buffer_this_thread() {
    BUFFER.with(|buffer| {
        if let Ok(mut buffer) = buffer.try_borrow_mut() {
            buffer.get_or_insert_with(|| String::with_capacity(FLUSH_AT * 2));
        }
    });
}

/// Writes this thread's buffered lines, if any, in one write.
pub fn flush_this_thread() {
    BUFFER.with(|buffer| {
        // Not re-entered (nothing below logs), but a failed borrow must
        // not panic: the lines then wait for the next flush.
        let Ok(mut buffer) = buffer.try_borrow_mut() else {
            return;
        };
        if let Some(lines) = buffer.as_mut().filter(|lines| !lines.is_empty()) {
            let _ = std::io::stderr().lock().write_all(lines.as_bytes());
            lines.clear();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_formats_carry_the_same_facts() {
        let url: Uri = "http://u:pw@127.0.0.1:9/x?token=t".parse().unwrap();
        let line = ActionLine {
            method: &Method::GET,
            url: &url,
            route: None,
            outcome: "success",
            attempts: 2,
            elapsed: Duration::from_millis(1234),
            last_status: Some(200),
            once: None,
            body: None,
        };
        let text = line.render(LogFormat::Text);
        assert!(text.ends_with(
            " GET http://127.0.0.1:9/x?token=REDACTED outcome=success attempts=2 elapsed=1.234s last_status=200"
        ), "{text}");
        let json: serde_json::Value = serde_json::from_str(&line.render(LogFormat::Json)).unwrap();
        assert_eq!(json["url"], "http://127.0.0.1:9/x?token=REDACTED");
        assert_eq!(json["outcome"], "success");
        assert_eq!(json["attempts"], 2);
        assert_eq!(json["elapsed_s"], 1.234);
        assert_eq!(json["last_status"], 200);
        assert!(json.get("forwarded_once").is_none());
        let once = ActionLine {
            once: Some("already_a_retry"),
            last_status: None,
            ..line
        };
        assert!(once
            .render(LogFormat::Text)
            .ends_with("last_status=none forwarded_once=already_a_retry"));
        let cut = ActionLine {
            body: Some(Ending::TimedOut),
            ..line
        };
        assert!(cut
            .render(LogFormat::Text)
            .ends_with(" elapsed=1.234s body=timed_out last_status=200"));
        let json: serde_json::Value = serde_json::from_str(&cut.render(LogFormat::Json)).unwrap();
        assert_eq!(json["body"], "timed_out");
    }

    #[test]
    fn seconds_are_written_as_f64_writes_them() {
        for nanos in [
            0u64,
            499_999,
            500_000,
            1_000_000,
            10_000_000,
            100_000_000,
            999_499_999,
            999_500_000,
            1_000_000_000,
            1_200_000_000,
            1_234_567_890,
            61_010_000_000,
            86_400_000_000_000,
        ] {
            let elapsed = Duration::from_nanos(nanos);
            let mut line = String::new();
            push_seconds(&mut line, elapsed);
            let expected = (elapsed.as_secs_f64() * 1000.0).round() / 1000.0;
            assert_eq!(line, expected.to_string(), "{nanos} ns");
        }
    }

    #[test]
    fn times_are_written_as_humantime_writes_them() {
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_227_200);
        for offset_ms in [
            0u64, 1, 999, 1_000, 1_001, 59_999, 60_000, 3_600_007, 86_399_999,
        ] {
            let at = base + Duration::from_millis(offset_ms) + Duration::from_nanos(123_456);
            let mut line = String::new();
            push_time(&mut line, at);
            assert_eq!(line, humantime::format_rfc3339_millis(at).to_string());
        }
        // Before 1970: the epoch's date, no panic.
        let mut line = String::new();
        push_time(&mut line, SystemTime::UNIX_EPOCH - Duration::from_secs(5));
        assert!(line.starts_with("1970-01-01T00:00:00."), "{line}");
    }
}
