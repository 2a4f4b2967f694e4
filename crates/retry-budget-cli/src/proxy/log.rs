//! One line per action on stderr: method, redacted URL, outcome, attempts,
//! elapsed time, last status and, for a relayed upstream response, how its
//! body ended, as `key=value` text or one JSON object. The line of a
//! relayed response is written when its body ends, not when its head is
//! relayed.
//!
//! Built from the action's [`Report`] only: no header is ever logged, so
//! no secret header can be, and the URL goes through
//! [`logged_uri`](crate::redact::logged_uri).

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
        let time = humantime::format_rfc3339_millis(SystemTime::now());
        let elapsed_s = (self.elapsed.as_secs_f64() * 1000.0).round() / 1000.0;
        match format {
            LogFormat::Json => {
                let mut line = serde_json::json!({
                    "time": time.to_string(),
                    "method": self.method.as_str(),
                    "url": logged_uri(self.url).to_string(),
                    "outcome": self.outcome,
                    "attempts": self.attempts,
                    "elapsed_s": elapsed_s,
                    "last_status": self.last_status,
                });
                if let Some(map) = line.as_object_mut() {
                    if let Some(once) = self.once {
                        map.insert("forwarded_once".into(), once.into());
                    }
                    if let Some(body) = self.body {
                        map.insert("body".into(), body.as_str().into());
                    }
                }
                line.to_string()
            }
            LogFormat::Text => {
                let status = self
                    .last_status
                    .map_or_else(|| "none".to_owned(), |s| s.to_string());
                let body = self
                    .body
                    .map_or_else(String::new, |b| format!(" body={}", b.as_str()));
                let mut line = format!(
                    "{time} {} {} outcome={} attempts={} elapsed={elapsed_s}s{body} last_status={status}",
                    self.method,
                    logged_uri(self.url),
                    self.outcome,
                    self.attempts,
                );
                if let Some(once) = self.once {
                    line.push_str(" forwarded_once=");
                    line.push_str(once);
                }
                line
            }
        }
    }

    /// Writes the line to stderr (a closed stderr is not worth failing a
    /// request for).
    pub fn write(&self, format: LogFormat) {
        let mut line = self.render(format);
        line.push('\n');
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
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
