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
//! [`logged_uri`](crate::redact::logged_uri).

use std::cell::RefCell;
use std::io::Write;
use std::time::{Duration, SystemTime};

use http::{Method, Uri};
use retry_budget::Report;

use super::args::LogFormat;
use super::body::Ending;
use crate::redact::logged_uri;

/// What one line says.
#[derive(Debug, Clone)]
pub struct ActionLine<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The upstream URL (redacted when written).
    pub url: &'a Uri,
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
        once: Option<&'static str>,
    ) -> Self {
        Self {
            method,
            url,
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
        use std::fmt::Write as _;
        let time = humantime::format_rfc3339_millis(SystemTime::now());
        let elapsed_s = (self.elapsed.as_secs_f64() * 1000.0).round() / 1000.0;
        match format {
            LogFormat::Json => {
                let mut json = serde_json::json!({
                    "time": time.to_string(),
                    "method": self.method.as_str(),
                    "url": logged_uri(self.url).to_string(),
                    "outcome": self.outcome,
                    "attempts": self.attempts,
                    "elapsed_s": elapsed_s,
                    "last_status": self.last_status,
                });
                if let Some(map) = json.as_object_mut() {
                    if let Some(once) = self.once {
                        map.insert("forwarded_once".into(), once.into());
                    }
                    if let Some(body) = self.body {
                        map.insert("body".into(), body.as_str().into());
                    }
                }
                let _ = write!(line, "{json}");
            }
            LogFormat::Text => {
                // Written in place: no string per field (a `String`'s
                // `fmt::Write` cannot fail).
                let _ = write!(
                    line,
                    "{time} {} {} outcome={} attempts={} elapsed={elapsed_s}s",
                    self.method,
                    logged_uri(self.url),
                    self.outcome,
                    self.attempts,
                );
                if let Some(body) = self.body {
                    line.push_str(" body=");
                    line.push_str(body.as_str());
                }
                match self.last_status {
                    Some(status) => {
                        let _ = write!(line, " last_status={status}");
                    }
                    None => line.push_str(" last_status=none"),
                }
                if let Some(once) = self.once {
                    line.push_str(" forwarded_once=");
                    line.push_str(once);
                }
            }
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

/// A thread's buffer is written once it holds this many bytes.
pub const FLUSH_AT: usize = 16 * 1024;

thread_local! {
    /// This thread's lines not yet written, if it buffers them.
    static BUFFER: RefCell<Option<String>> = const { RefCell::new(None) };
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
}
