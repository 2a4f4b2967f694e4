//! The log line of an action, written once: when it ends, or, if the
//! connection is dropped first (the caller left, or the drain time ran
//! out), when the guard is dropped.

use std::sync::Arc;

use http::{Method, Uri};
use retry_budget::Report;
use tokio::time::Instant;
use tower_retry_budget::ReportSlot;

use super::args::LogFormat;
use super::log::ActionLine;
use super::relay_body::Ending;
use crate::common::redact::logged_uri;

/// Writes an action's line once (see the [module docs](self)).
pub struct LogGuard {
    /// The caller's method.
    pub method: Method,
    /// The upstream URL.
    pub url: Uri,
    /// When the proxy received the request.
    pub received: Instant,
    /// Where the layer leaves its report.
    pub slot: ReportSlot,
    /// Why the request went once, if it did.
    pub once: Option<&'static str>,
    /// The config file's route that took it (none for the flags' one).
    pub route: Option<Arc<str>>,
    /// The line's format.
    pub format: LogFormat,
    /// Whether the line is written.
    pub logged: bool,
    /// The proxy's own outcome, when it overrides the core's.
    pub outcome: Option<&'static str>,
}

impl LogGuard {
    /// Writes the line of `report`, with how the relayed body ended, if
    /// one was relayed.
    pub fn log(&mut self, report: &Report, body: Option<Ending>) {
        self.logged = true;
        let mut line = self.line(report);
        line.body = body;
        if let Some(outcome) = self.outcome {
            line.outcome = outcome;
        }
        line.write(self.format);
    }

    fn line<'a>(&'a self, report: &Report) -> ActionLine<'a> {
        ActionLine::of_report(
            &self.method,
            &self.url,
            report,
            self.received.elapsed(),
            (self.once, self.route.as_deref()),
        )
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        if self.logged {
            return;
        }
        // The caller left: the layer's future, dropped first, has filled the
        // slot with the core's report (`cancelled`).
        match self.slot.get() {
            Some(report) => self.line(&report).write(self.format),
            // Every request of this stack is budgeted, so the layer always
            // reports; no outcome is made up if it did not.
            None => tracing::error!(
                target: "retry_budget::proxy",
                "internal error: the retry layer gave no report for {} {}",
                self.method,
                logged_uri(&self.url),
            ),
        }
    }
}
