//! Live steps on stderr: an [`Observer`] on the tower layer that prints one
//! human line per step of the action, as it happens.
//!
//! ```text
//! [ 0.0 s] attempt 1/3 started (reserved to 4.0 s of the 20 s budget)
//! [ 2.0 s] attempt 1/3: 429, Retry-After: 3 s (valid)
//! [ 2.0 s] waiting 3 s (server asked 3 s): next start at 5.0 s, reservation to 9.0 s of the 20 s budget
//! [ 5.0 s] woke, 15.0 s of the budget left
//! ```
//!
//! The layer hands over the trail's typed [`Event`]s; every kind is put
//! into words here (an attempt started, a response, a wait, a wake, a retry
//! refused by the client budget, a hold-off, a retry forbidden by the
//! server, a translated response, ...). Nothing here decides anything: every
//! number comes from the event, and the policy is only used to print
//! "n/max" and "of the 20 s budget". While a wait is planned and stderr is
//! a terminal, a countdown line is redrawn in place (`\r`) by a tokio
//! interval ([`Console::spawn_countdown`]); on a pipe, only the plain lines
//! appear. With `--verbose`, [`ProgressLayer`] adds tower-http's `tracing`
//! events.

use std::fmt::{self, Write as _};
use std::io::{self, IsTerminal, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use retry_budget::{
    trail::{Event, EventKind, RetryAfterSeen},
    trail_text::{Note, WaitReason},
    Policy, Secs, StatusSet,
};
use tower_retry_budget::observer::{ActionId, Observer};
use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

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

/// The observer that turns the layer's events into lines.
#[derive(Debug, Clone)]
pub struct Progress {
    console: Console,
    max_attempts: u32,
    total_budget: Duration,
    retried: StatusSet,
}

impl Progress {
    /// Prints to `console`; `policy` is only used to say "n/max", "of the
    /// 20 s budget", and to show `Retry-After` on the responses it retries.
    pub fn new(console: Console, policy: &Policy) -> Self {
        Self {
            console,
            max_attempts: policy.max_attempts(),
            total_budget: policy.total_budget(),
            retried: *policy.retry_statuses(),
        }
    }

    /// The line for one event, and the countdown's new state (`None`: left
    /// as is).
    fn describe(&self, event: &Event) -> (String, Option<Option<Wait>>) {
        let at = stamp(event.at.as_secs_f64());
        let attempt = |n: u32| format!("attempt {n}/{}", self.max_attempts);
        let budget = Secs(self.total_budget);
        let point = |v: Duration| format!("{:.1} s", v.as_secs_f64());
        match &event.kind {
            EventKind::AttemptStarted {
                attempt: n,
                reservation_end,
            } => (
                format!(
                    "{at} {} started (reserved to {} of the {budget} budget)",
                    attempt(*n),
                    point(*reservation_end)
                ),
                Some(None),
            ),
            EventKind::Response {
                attempt: n,
                status,
                retry_after,
            } => {
                let mut line = format!("{at} {}: {status}", attempt(*n));
                // The header matters for a status the policy retries, or
                // whenever the server sent one.
                let missing = matches!(retry_after, RetryAfterSeen::Missing);
                if self.retried.contains(*status) || !missing {
                    let _ = write!(line, ", Retry-After: {}", retry_after);
                }
                (line, None)
            }
            EventKind::WaitPlanned {
                wait,
                until,
                reservation_end,
                basis,
            } => {
                let why = WaitReason(basis);
                let countdown = Wait {
                    seen: Instant::now(),
                    at_s: event.at.as_secs_f64(),
                    wait_s: wait.as_secs_f64(),
                    until_s: until.as_secs_f64(),
                };
                (
                    format!(
                        "{at} waiting {} ({why}): next start at {}, reservation to {} of the {budget} budget",
                        Secs(*wait),
                        point(*until),
                        point(*reservation_end),
                    ),
                    Some(Some(countdown)),
                )
            }
            EventKind::Woke { late_by, .. } => {
                let mut line = format!(
                    "{at} woke, {} of the budget left",
                    point(event.remaining_budget)
                );
                // A few milliseconds late is how real timers fire.
                if *late_by >= Duration::from_millis(10) {
                    let _ = write!(line, " (timer {} late)", Secs(*late_by));
                }
                (line, Some(None))
            }
            EventKind::CallerLeft { .. } => (
                format!("{at} caller left: no further attempt is sent"),
                Some(None),
            ),
            EventKind::AttemptTimedOut { attempt: n } => (
                format!("{at} {} ran past its time limit: abandoned", attempt(*n)),
                Some(None),
            ),
            EventKind::TransportFailed { attempt: n } => (
                format!("{at} {} failed before any response", attempt(*n)),
                Some(None),
            ),
            EventKind::RetryRefused { attempt: n } => (
                format!(
                    "{at} retry refused: the client's retry budget does not pay for {}",
                    attempt(*n)
                ),
                Some(None),
            ),
            EventKind::HeldOff { until } => (
                format!(
                    "{at} held off: the service asked this client to wait until {}, \
                     too late for the first attempt to fit the {budget} budget; nothing is sent",
                    point(*until)
                ),
                Some(None),
            ),
            EventKind::Stopped { outcome } => (format!("{at} stopped: {outcome}"), Some(None)),
            kind => match Note::of(kind) {
                Some(note) => match note.attempt() {
                    Some(n) => (format!("{at} {}: {note}", attempt(n)), None),
                    None => (format!("{at} {note}"), None),
                },
                // A kind newer than this program.
                None => (format!("{at} {kind:?}"), None),
            },
        }
    }
}

impl Observer for Progress {
    fn on_event(&self, _id: ActionId, event: &Event) {
        let (line, wait) = self.describe(event);
        if let Some(wait) = wait {
            self.console.set_wait(wait);
        }
        self.console.line(&line);
    }
}

/// `[ 2.0 s]`.
pub fn stamp(at_s: f64) -> String {
    format!("[{at_s:>4.1} s]")
}

/// The `tracing` layer for `--verbose`: tower-http's trace events as lines
/// (the steps of the action come from [`Progress`]).
#[derive(Debug)]
pub struct ProgressLayer {
    console: Console,
    verbose: bool,
}

impl ProgressLayer {
    /// Prints to `console` (nothing unless [`verbose`](Self::verbose)).
    pub fn new(console: Console, _policy: &Policy) -> Self {
        Self {
            console,
            verbose: false,
        }
    }

    /// Prints tower-http's trace events.
    pub fn verbose(mut self, verbose: bool) -> Self {
        self.verbose = verbose;
        self
    }

    fn wants(&self, metadata: &Metadata<'_>) -> bool {
        self.verbose && metadata.is_event() && metadata.target().starts_with(TOWER_HTTP)
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

    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let metadata = event.metadata();
        if !self.wants(metadata) {
            return;
        }
        let mut fields = Generic::default();
        event.record(&mut fields);
        let mut line = format!("{INDENT} [{}] {}", metadata.target(), fields.message);
        for (name, value) in &fields.other {
            let _ = write!(line, " {name}={value}");
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

#[cfg(test)]
mod tests {
    use super::*;
    use retry_budget::trail::WaitBasis;
    use retry_budget::{retry_after::RetryAfter, Outcome};
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

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    /// An event at `at` s of the default 20 s budget.
    fn event(at: f64, kind: EventKind) -> Event {
        Event {
            at: s(at),
            remaining_budget: s(20.0 - at),
            kind,
        }
    }

    fn response(at: f64, attempt: u32, status: u16, retry_after: &str) -> Event {
        let seen = if retry_after.is_empty() {
            RetryAfterSeen::Missing
        } else {
            RetryAfterSeen::from(&RetryAfter::parse(retry_after))
        };
        event(
            at,
            EventKind::Response {
                attempt,
                status,
                retry_after: seen,
            },
        )
    }

    fn capture(live: bool, events: impl FnOnce(&Progress, &Console)) -> String {
        let buffer = Buffer::default();
        let console = Console::new(Box::new(buffer.clone()), live);
        let progress = Progress::new(console.clone(), &Policy::default());
        events(&progress, &console);
        buffer.text()
    }

    fn tell(progress: &Progress, events: &[Event]) {
        for event in events {
            progress.on_event(ActionId(0), event);
        }
    }

    fn planned(at: f64, wait: f64, basis: WaitBasis) -> Event {
        event(
            at,
            EventKind::WaitPlanned {
                wait: s(wait),
                until: s(at + wait),
                reservation_end: s(at + wait + 4.0),
                basis,
            },
        )
    }

    #[test]
    fn schedule_a_reads_as_the_issue_shows() {
        let text = capture(false, |progress, _| {
            tell(
                progress,
                &[
                    event(
                        0.0,
                        EventKind::AttemptStarted {
                            attempt: 1,
                            reservation_end: s(4.0),
                        },
                    ),
                    response(2.0, 1, 429, "3"),
                    planned(2.0, 3.0, WaitBasis::Server { requested: s(3.0) }),
                    event(
                        5.0,
                        EventKind::Woke {
                            waited_from: s(2.0),
                            late_by: Duration::ZERO,
                        },
                    ),
                    response(14.0, 3, 200, ""),
                    response(14.0, 3, 503, "2"),
                    event(
                        14.0,
                        EventKind::Stopped {
                            outcome: Outcome::Success,
                        },
                    ),
                ],
            );
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
    fn every_kind_of_step_is_put_into_words() {
        let text = capture(false, |progress, _| {
            tell(
                progress,
                &[
                    response(2.0, 1, 429, ""),
                    response(2.0, 1, 429, "1.5"),
                    response(2.0, 1, 429, "Mon, 01 Jan 2024 12:00:06 GMT"),
                    planned(2.0, 2.0, WaitBasis::Fallback { completed: 1 }),
                    planned(
                        2.0,
                        1.5,
                        WaitBasis::FallbackJittered {
                            completed: 1,
                            unjittered: s(2.0),
                        },
                    ),
                    planned(0.0, 3.0, WaitBasis::HoldOff),
                    event(
                        4.5,
                        EventKind::Woke {
                            waited_from: s(2.0),
                            late_by: s(0.5),
                        },
                    ),
                    event(0.3, EventKind::AttemptTimedOut { attempt: 1 }),
                    event(0.0, EventKind::TransportFailed { attempt: 2 }),
                    event(
                        3.0,
                        EventKind::CallerLeft {
                            waited_from: Some(s(2.0)),
                        },
                    ),
                    event(1.0, EventKind::RetryRefused { attempt: 2 }),
                    event(0.0, EventKind::HeldOff { until: s(30.0) }),
                    event(1.0, EventKind::RetryForbidden { attempt: 1 }),
                    event(
                        1.0,
                        EventKind::Translated {
                            attempt: 1,
                            from: "grpc-status 8 (RESOURCE_EXHAUSTED)".to_owned(),
                        },
                    ),
                    event(
                        1.0,
                        EventKind::Stopped {
                            outcome: Outcome::RetryThrottled,
                        },
                    ),
                ],
            );
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "[ 2.0 s] attempt 1/3: 429, Retry-After: none (missing)",
                "[ 2.0 s] attempt 1/3: 429, Retry-After: 1.5 (invalid)",
                "[ 2.0 s] attempt 1/3: 429, Retry-After: Mon, 01 Jan 2024 12:00:06 GMT (valid date)",
                "[ 2.0 s] waiting 2 s (fallback: no usable Retry-After): next start at 4.0 s, reservation to 8.0 s of the 20 s budget",
                "[ 2.0 s] waiting 1.5 s (fallback 2 s with jitter: no usable Retry-After): next start at 3.5 s, reservation to 7.5 s of the 20 s budget",
                "[ 0.0 s] waiting 3 s (hold-off: the service asked this client to wait): next start at 3.0 s, reservation to 7.0 s of the 20 s budget",
                "[ 4.5 s] woke, 15.5 s of the budget left (timer 0.5 s late)",
                "[ 0.3 s] attempt 1/3 ran past its time limit: abandoned",
                "[ 0.0 s] attempt 2/3 failed before any response",
                "[ 3.0 s] caller left: no further attempt is sent",
                "[ 1.0 s] retry refused: the client's retry budget does not pay for attempt 2/3",
                "[ 0.0 s] held off: the service asked this client to wait until 30.0 s, too late for the first attempt to fit the 20 s budget; nothing is sent",
                "[ 1.0 s] attempt 1/3: retry forbidden by the server",
                "[ 1.0 s] attempt 1/3: translated from grpc-status 8 (RESOURCE_EXHAUSTED)",
                "[ 1.0 s] stopped: retry_throttled",
            ]
        );
        // Words, never a Rust debug form.
        assert!(!text.contains('{') && !text.contains("Some("), "{text}");
    }

    #[test]
    fn countdown_is_drawn_only_on_a_live_screen_and_erased_before_lines() {
        let plan = |progress: &Progress, console: &Console| {
            tell(
                progress,
                &[planned(2.0, 3.0, WaitBasis::Server { requested: s(3.0) })],
            );
            console.tick();
            tell(
                progress,
                &[event(
                    5.0,
                    EventKind::Woke {
                        waited_from: s(2.0),
                        late_by: Duration::ZERO,
                    },
                )],
            );
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
    fn verbose_shows_tower_http_events_and_nothing_else() {
        let buffer = Buffer::default();
        let console = Console::new(Box::new(buffer.clone()), false);
        let layer = ProgressLayer::new(console, &Policy::default()).verbose(true);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "tower_http::trace::on_response", status = 200u16, "finished");
            // The layer's own tracing events are for logs, not for this.
            tracing::debug!(target: "retry_budget", at_s = 0.0, "attempt started");
        });
        assert_eq!(
            buffer.text(),
            format!("{INDENT} [tower_http::trace::on_response] finished status=200\n")
        );
    }
}
