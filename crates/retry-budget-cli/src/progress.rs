//! Live steps on stderr: a [`tracing_subscriber::Layer`] that listens to the
//! `retry_budget` events of the tower layer and prints one human line per
//! step, as it happens.
//!
//! ```text
//! [ 0.0 s] attempt 1/3 started (reserved to 4.0 s of the 20 s budget)
//! [ 2.0 s] attempt 1/3: 429, Retry-After: 3 s (valid)
//! [ 2.0 s] waiting 3 s (server asked 3 s): next start at 5.0 s, reservation to 9.0 s of the 20 s budget
//! [ 5.0 s] woke, 15.0 s of the budget left
//! ```
//!
//! Nothing here decides anything: every number comes from the event's fields
//! (`at_s`, `remaining_budget_s`, `wait_s`, `until_s`, `reservation_end_s`,
//! ...), and the policy is only used to print "n/max" and "of the 20 s
//! budget". While a wait is planned and stderr is a terminal, a countdown
//! line is redrawn in place (`\r`) by a tokio interval
//! ([`Console::spawn_countdown`]); on a pipe, only the plain lines appear.

use std::fmt::{self, Write as _};
use std::io::{self, IsTerminal, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use retry_budget::{Policy, Secs, StatusSet};
use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

/// The target of the tower layer's events.
const TARGET: &str = "retry_budget";
/// The prefix of tower-http's trace events (shown with `--verbose`).
const TOWER_HTTP: &str = "tower_http";
/// Blank space as wide as a `[ 2.0 s]` time stamp, for lines without one.
pub const INDENT: &str = "        ";

/// Where the human lines go: stderr, or any writer in tests. Clones share
/// one screen, so the countdown line and the step lines never mix.
#[derive(Clone)]
pub struct Console {
    screen: Arc<Mutex<Screen>>,
}

struct Screen {
    out: Box<dyn Write + Send>,
    /// Whether the countdown is drawn (stderr is a terminal).
    live: bool,
    /// Whether a countdown line is on screen now (to be erased first).
    drawn: bool,
    /// The wait in progress, as the last "wait planned" event gave it.
    wait: Option<Wait>,
}

/// A wait in progress, for the countdown only.
#[derive(Debug, Clone, Copy)]
struct Wait {
    /// When the "wait planned" event was seen.
    seen: Instant,
    /// Its `at_s`.
    at_s: f64,
    /// Its `wait_s`.
    wait_s: f64,
    /// Its `until_s`.
    until_s: f64,
}

impl fmt::Debug for Console {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Console(..)")
    }
}

impl Console {
    /// Stderr; the countdown is drawn only if stderr is a terminal.
    pub fn stderr() -> Self {
        let live = io::stderr().is_terminal();
        Self::new(Box::new(io::stderr()), live)
    }

    /// Any writer; `live` draws the countdown.
    pub fn new(out: Box<dyn Write + Send>, live: bool) -> Self {
        Self {
            screen: Arc::new(Mutex::new(Screen {
                out,
                live,
                drawn: false,
                wait: None,
            })),
        }
    }

    fn screen(&self) -> std::sync::MutexGuard<'_, Screen> {
        self.screen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Prints `text` (one or more lines), erasing the countdown first.
    pub fn line(&self, text: &str) {
        let mut screen = self.screen();
        screen.erase();
        // Nothing sensible is left to do if stderr itself fails.
        let _ = writeln!(screen.out, "{text}");
        let _ = screen.out.flush();
    }

    /// Erases the countdown line, if one is drawn.
    pub fn clear(&self) {
        let mut screen = self.screen();
        screen.wait = None;
        screen.erase();
        let _ = screen.out.flush();
    }

    fn set_wait(&self, wait: Option<Wait>) {
        self.screen().wait = wait;
    }

    /// Redraws the countdown line, if a wait is in progress and the screen
    /// is live.
    pub fn tick(&self) {
        let mut screen = self.screen();
        let Some(wait) = screen.wait.filter(|_| screen.live) else {
            return;
        };
        let line = countdown(&wait, wait.seen.elapsed());
        let _ = write!(screen.out, "\r\x1b[2K{line}");
        let _ = screen.out.flush();
        screen.drawn = true;
    }

    /// On a terminal, redraws the countdown every 100 ms until the returned
    /// task is aborted; elsewhere, nothing (`None`).
    pub fn spawn_countdown(&self) -> Option<tokio::task::JoinHandle<()>> {
        if !self.screen().live {
            return None;
        }
        let console = self.clone();
        Some(tokio::spawn(async move {
            let mut interval = tokio::time::interval(Duration::from_millis(100));
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                interval.tick().await;
                console.tick();
            }
        }))
    }
}

impl Screen {
    fn erase(&mut self) {
        if self.drawn {
            let _ = write!(self.out, "\r\x1b[2K");
            self.drawn = false;
        }
    }
}

/// The countdown line, `since` after the wait was planned.
fn countdown(wait: &Wait, since: Duration) -> String {
    const WIDTH: usize = 24;
    let since = since.as_secs_f64();
    let left = (wait.wait_s - since).max(0.0);
    let done = if wait.wait_s > 0.0 {
        (since / wait.wait_s).clamp(0.0, 1.0)
    } else {
        1.0
    };
    // Rounded down, so the bar is never fuller than the wait.
    let filled = ((done * WIDTH as f64) as usize).min(WIDTH);
    format!(
        "{} waiting [{}{}] {left:.1} s left, next start at {:.1} s",
        stamp(wait.at_s + since),
        "#".repeat(filled),
        " ".repeat(WIDTH - filled),
        wait.until_s,
    )
}

/// The `tracing` layer that turns `retry_budget` events into lines.
#[derive(Debug)]
pub struct ProgressLayer {
    console: Console,
    max_attempts: u32,
    total_budget: Duration,
    retried: StatusSet,
    verbose: bool,
}

impl ProgressLayer {
    /// Prints to `console`; `policy` is only used to say "n/max", "of the
    /// 20 s budget", and to show `Retry-After` on the responses it retries.
    pub fn new(console: Console, policy: &Policy) -> Self {
        Self {
            console,
            max_attempts: policy.max_attempts(),
            total_budget: policy.total_budget(),
            retried: *policy.retry_statuses(),
            verbose: false,
        }
    }

    /// Also prints tower-http's trace events.
    pub fn verbose(mut self, verbose: bool) -> Self {
        self.verbose = verbose;
        self
    }

    fn wants(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_event()
            && (metadata.target() == TARGET
                || (self.verbose && metadata.target().starts_with(TOWER_HTTP)))
    }

    /// The line for one `retry_budget` event, and the countdown's new state.
    fn describe(&self, step: &Fields) -> (String, Option<Option<Wait>>) {
        let at = stamp(step.at_s.unwrap_or_default());
        let attempt = || match step.attempt {
            Some(n) => format!("attempt {n}/{}", self.max_attempts),
            None => "attempt".to_owned(),
        };
        let budget = Secs(self.total_budget);
        let point = |v: Option<f64>| format!("{:.1} s", v.unwrap_or_default());
        match step.message.as_str() {
            "attempt started" => (
                format!(
                    "{at} {} started (reserved to {} of the {budget} budget)",
                    attempt(),
                    point(step.reservation_end_s)
                ),
                Some(None),
            ),
            "response" => {
                let mut line = format!("{at} {}: ", attempt());
                match step.status {
                    Some(status) => {
                        let _ = write!(line, "{status}");
                    }
                    None => line.push_str("no status"),
                }
                // The header matters for a status the policy retries, or
                // whenever the server sent one.
                let retried = step
                    .status
                    .and_then(|s| u16::try_from(s).ok())
                    .is_some_and(|s| self.retried.contains(s));
                let missing = matches!(step.retry_after.as_deref(), None | Some("missing"));
                if retried || !missing {
                    let _ = write!(
                        line,
                        ", Retry-After: {}",
                        retry_after(step.retry_after.as_deref())
                    );
                }
                (line, None)
            }
            "wait planned" => {
                let why = match (step.source.as_deref(), step.requested_s) {
                    (Some("server"), Some(requested)) => {
                        format!("server asked {}", secs(requested))
                    }
                    (Some("fallback"), _) => "fallback: no usable Retry-After".to_owned(),
                    (Some("reset_header"), Some(requested)) => {
                        format!("reset header asked {}", secs(requested))
                    }
                    // A kind of wait the layer does not name in its events.
                    (Some(_), _) => "local wait".to_owned(),
                    (None, _) => "no reason given".to_owned(),
                };
                let wait = Wait {
                    seen: Instant::now(),
                    at_s: step.at_s.unwrap_or_default(),
                    wait_s: step.wait_s.unwrap_or_default(),
                    until_s: step.until_s.unwrap_or_default(),
                };
                (
                    format!(
                        "{at} waiting {} ({why}): next start at {}, reservation to {} of the {budget} budget",
                        secs(wait.wait_s),
                        point(step.until_s),
                        point(step.reservation_end_s),
                    ),
                    Some(Some(wait)),
                )
            }
            "woke" => {
                let mut line = format!(
                    "{at} woke, {} of the budget left",
                    point(step.remaining_budget_s)
                );
                // A few milliseconds late is how real timers fire.
                if let Some(late) = step.late_by_s.filter(|l| *l >= 0.01) {
                    let _ = write!(line, " (timer {} late)", secs(late));
                }
                (line, Some(None))
            }
            "caller left" => (
                format!("{at} caller left: no further attempt is sent"),
                Some(None),
            ),
            "attempt timed out" => (
                format!("{at} {} ran past its time limit: abandoned", attempt()),
                Some(None),
            ),
            "transport failed" => (
                format!("{at} {} failed before any response", attempt()),
                Some(None),
            ),
            "stopped" => (
                format!(
                    "{at} stopped: {}",
                    step.outcome.as_deref().unwrap_or("unknown")
                ),
                Some(None),
            ),
            other => (format!("{at} {other}"), None),
        }
    }
}

/// `[ 2.0 s]`.
pub fn stamp(at_s: f64) -> String {
    format!("[{at_s:>4.1} s]")
}

/// A duration given in seconds, as the reports print it (`3 s`, `0.3 s`).
fn secs(value: f64) -> Secs {
    Secs(Duration::try_from_secs_f64(value).unwrap_or_default())
}

/// The `retry_after` field (`missing`, `3 s`, an HTTP-date, or
/// `invalid "1.5"`) as shown to a person.
fn retry_after(field: Option<&str>) -> String {
    match field {
        None | Some("missing") => "none (missing)".to_owned(),
        Some(text) => match text.strip_prefix("invalid ") {
            Some(raw) => format!("{raw} (invalid)"),
            None if text.starts_with("unmeasured date ") => format!(
                "{} (a date no trusted clock can measure)",
                &text["unmeasured date ".len()..]
            ),
            None if text.ends_with(" s") => format!("{text} (valid)"),
            None => format!("{text} (valid date)"),
        },
    }
}

impl<S: Subscriber> Layer<S> for ProgressLayer {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.wants(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        self.wants(metadata)
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let metadata = event.metadata();
        if !self.wants(metadata) {
            return;
        }
        if metadata.target() != TARGET {
            let mut fields = Generic::default();
            event.record(&mut fields);
            let mut line = format!("{INDENT} [{}] {}", metadata.target(), fields.message);
            for (name, value) in &fields.other {
                let _ = write!(line, " {name}={value}");
            }
            self.console.line(&line);
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let (line, wait) = self.describe(&fields);
        if let Some(wait) = wait {
            self.console.set_wait(wait);
        }
        self.console.line(&line);
    }
}

/// The fields of another target's event, as text.
#[derive(Debug, Default)]
struct Generic {
    message: String,
    other: Vec<(&'static str, String)>,
}

impl Visit for Generic {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            name => self.other.push((name, value.to_owned())),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            name => self.other.push((name, format!("{value:?}"))),
        }
    }
}

/// The fields of one `retry_budget` event.
#[derive(Debug, Default)]
struct Fields {
    message: String,
    at_s: Option<f64>,
    remaining_budget_s: Option<f64>,
    attempt: Option<u64>,
    status: Option<u64>,
    retry_after: Option<String>,
    wait_s: Option<f64>,
    until_s: Option<f64>,
    reservation_end_s: Option<f64>,
    source: Option<String>,
    requested_s: Option<f64>,
    late_by_s: Option<f64>,
    outcome: Option<String>,
    /// Any other field, as text (for tower-http's events).
    other: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        match field.name() {
            "at_s" => self.at_s = Some(value),
            "remaining_budget_s" => self.remaining_budget_s = Some(value),
            "wait_s" => self.wait_s = Some(value),
            "until_s" => self.until_s = Some(value),
            "reservation_end_s" => self.reservation_end_s = Some(value),
            "requested_s" => self.requested_s = Some(value),
            "late_by_s" => self.late_by_s = Some(value),
            name => self.other.push((name, value.to_string())),
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "attempt" => self.attempt = Some(value),
            "status" => self.status = Some(value),
            name => self.other.push((name, value.to_string())),
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        match (field.name(), u64::try_from(value)) {
            ("attempt", Ok(v)) => self.attempt = Some(v),
            ("status", Ok(v)) => self.status = Some(v),
            (name, _) => self.other.push((name, value.to_string())),
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            "retry_after" => self.retry_after = Some(value.to_owned()),
            "source" => self.source = Some(value.to_owned()),
            "outcome" => self.outcome = Some(value.to_owned()),
            name => self.other.push((name, value.to_owned())),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        match field.name() {
            "message" => self.message = text,
            // Recorded with `%` (Display): the text as is.
            "retry_after" | "source" | "outcome" => self.record_str(field, &text),
            name => self.other.push((name, text)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    /// A writer whose bytes the test can read back.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Buffer {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn capture(live: bool, emit: impl FnOnce(&Console)) -> String {
        let buffer = Buffer::default();
        let console = Console::new(Box::new(buffer.clone()), live);
        let layer = ProgressLayer::new(console.clone(), &Policy::default());
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || emit(&console));
        buffer.text()
    }

    #[test]
    fn schedule_a_reads_as_the_issue_shows() {
        let text = capture(false, |_| {
            tracing::debug!(target: "retry_budget", at_s = 0.0, remaining_budget_s = 20.0,
                attempt = 1u32, reservation_end_s = 4.0, "attempt started");
            tracing::debug!(target: "retry_budget", at_s = 2.0, remaining_budget_s = 18.0,
                attempt = 1u32, status = 429u16, retry_after = "3 s", "response");
            tracing::debug!(target: "retry_budget", at_s = 2.0, remaining_budget_s = 18.0,
                wait_s = 3.0, until_s = 5.0, reservation_end_s = 9.0, source = "server",
                requested_s = Some(3.0), "wait planned");
            tracing::debug!(target: "retry_budget", at_s = 5.0, remaining_budget_s = 15.0,
                waited_from_s = 2.0, late_by_s = 0.0, "woke");
            tracing::debug!(target: "retry_budget", at_s = 14.0, remaining_budget_s = 6.0,
                attempt = 3u32, status = 200u16, retry_after = "missing", "response");
            tracing::debug!(target: "retry_budget", at_s = 14.0, remaining_budget_s = 6.0,
                attempt = 3u32, status = 503u16, retry_after = "2 s", "response");
            tracing::info!(target: "retry_budget", at_s = 14.0, remaining_budget_s = 6.0,
                outcome = "success", "stopped");
        });
        assert_eq!(
            text,
            "[ 0.0 s] attempt 1/3 started (reserved to 4.0 s of the 20 s budget)\n\
             [ 2.0 s] attempt 1/3: 429, Retry-After: 3 s (valid)\n\
             [ 2.0 s] waiting 3 s (server asked 3 s): next start at 5.0 s, reservation to 9.0 s of the 20 s budget\n\
             [ 5.0 s] woke, 15.0 s of the budget left\n\
             [14.0 s] attempt 3/3: 200\n\
             [14.0 s] attempt 3/3: 503, Retry-After: 2 s (valid)\n\
             [14.0 s] stopped: success\n"
        );
    }

    #[test]
    fn retry_after_forms_and_other_steps() {
        let text = capture(false, |_| {
            tracing::debug!(target: "retry_budget", at_s = 2.0, remaining_budget_s = 18.0,
                attempt = 1u32, status = 429u16, retry_after = "missing", "response");
            tracing::debug!(target: "retry_budget", at_s = 2.0, remaining_budget_s = 18.0,
                attempt = 1u32, status = 429u16, retry_after = %"invalid \"1.5\"", "response");
            tracing::debug!(target: "retry_budget", at_s = 2.0, remaining_budget_s = 18.0,
                attempt = 1u32, status = 429u16,
                retry_after = "Mon, 01 Jan 2024 12:00:06 GMT", "response");
            tracing::debug!(target: "retry_budget", at_s = 2.0, remaining_budget_s = 18.0,
                wait_s = 2.0, until_s = 4.0, reservation_end_s = 8.0, source = "fallback",
                requested_s = None::<f64>, "wait planned");
            tracing::debug!(target: "retry_budget", at_s = 4.5, remaining_budget_s = 15.5,
                waited_from_s = 2.0, late_by_s = 0.5, "woke");
            tracing::debug!(target: "retry_budget", at_s = 0.3, remaining_budget_s = 19.7,
                attempt = 1u32, "attempt timed out");
            tracing::debug!(target: "retry_budget", at_s = 0.0, remaining_budget_s = 20.0,
                attempt = 2u32, "transport failed");
            tracing::debug!(target: "retry_budget", at_s = 3.0, remaining_budget_s = 17.0,
                waited_from_s = Some(2.0), "caller left");
            // Other targets are not shown without --verbose.
            tracing::debug!(target: "tower_http::trace::on_response", status = 200u16, "finished");
            tracing::debug!(target: "hyper_util", "connecting");
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "[ 2.0 s] attempt 1/3: 429, Retry-After: none (missing)",
                "[ 2.0 s] attempt 1/3: 429, Retry-After: \"1.5\" (invalid)",
                "[ 2.0 s] attempt 1/3: 429, Retry-After: Mon, 01 Jan 2024 12:00:06 GMT (valid date)",
                "[ 2.0 s] waiting 2 s (fallback: no usable Retry-After): next start at 4.0 s, reservation to 8.0 s of the 20 s budget",
                "[ 4.5 s] woke, 15.5 s of the budget left (timer 0.5 s late)",
                "[ 0.3 s] attempt 1/3 ran past its time limit: abandoned",
                "[ 0.0 s] attempt 2/3 failed before any response",
                "[ 3.0 s] caller left: no further attempt is sent",
            ]
        );
    }

    #[test]
    fn countdown_is_drawn_only_on_a_live_screen_and_erased_before_lines() {
        let plan = |console: &Console| {
            tracing::debug!(target: "retry_budget", at_s = 2.0, remaining_budget_s = 18.0,
                wait_s = 3.0, until_s = 5.0, reservation_end_s = 9.0, source = "server",
                requested_s = Some(3.0), "wait planned");
            console.tick();
            tracing::debug!(target: "retry_budget", at_s = 5.0, remaining_budget_s = 15.0,
                waited_from_s = 2.0, late_by_s = 0.0, "woke");
            // No wait in progress: nothing drawn.
            console.tick();
        };
        let plain = capture(false, plan);
        assert!(!plain.contains('\r'), "{plain:?}");
        assert_eq!(plain.lines().count(), 2);

        let live = capture(true, plan);
        let (before, after) = live.split_once("\r\x1b[2K[").expect("a countdown line");
        assert!(before.ends_with("of the 20 s budget\n"), "{live:?}");
        assert!(after.contains("waiting ["), "{live:?}");
        assert!(after.contains("left, next start at 5.0 s"), "{live:?}");
        // Erased before the next line.
        assert!(after.contains("\r\x1b[2K[ 5.0 s] woke"), "{live:?}");
        assert!(live.ends_with("of the budget left\n"), "{live:?}");
    }

    #[test]
    fn countdown_line() {
        let wait = Wait {
            seen: Instant::now(),
            at_s: 2.0,
            wait_s: 4.0,
            until_s: 6.0,
        };
        assert_eq!(
            countdown(&wait, Duration::from_secs(1)),
            "[ 3.0 s] waiting [######                  ] 3.0 s left, next start at 6.0 s"
        );
        assert_eq!(
            countdown(&wait, Duration::from_secs(9)),
            "[11.0 s] waiting [########################] 0.0 s left, next start at 6.0 s"
        );
    }

    #[test]
    fn verbose_shows_tower_http_events() {
        let buffer = Buffer::default();
        let console = Console::new(Box::new(buffer.clone()), false);
        let layer = ProgressLayer::new(console, &Policy::default()).verbose(true);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "tower_http::trace::on_response", status = 200u16, "finished");
        });
        assert_eq!(
            buffer.text(),
            format!("{INDENT} [tower_http::trace::on_response] finished status=200\n")
        );
    }
}
