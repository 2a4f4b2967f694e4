//! A property test driving the adapter's future (not only the core) under
//! tokio's paused clock: arbitrary answer delays, statuses, `Retry-After`
//! values (huge ones included), readiness results (ready, failing, late),
//! policies (up to `Duration::MAX`), a hold-off map, a client budget and a
//! cancellation token. Whatever happens: no panic, a defined outcome, a
//! report on every response and error, the slot filled with that report,
//! the observer told the same trail and the report once, no more calls
//! than attempts, and no attempt whose full cap did not fit the budget.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use proptest::prelude::*;
use retry_budget::ratio::Ratio;
use tokio::time::{sleep, Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tower::Service;
use tower_retry_budget::{
    budget::ClientBudget,
    hold_off::HoldOff,
    observer::{ActionId, Event, Observer},
    Outcome, Policy, Report, ReportSlot, RetryBudgetLayer,
};

#[derive(Debug)]
struct Broken;

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("broken")
    }
}

impl std::error::Error for Broken {}

#[derive(Debug, Clone)]
enum Ready {
    Now,
    Fails,
    After(Duration),
}

#[derive(Debug, Clone)]
struct Answer {
    after: Duration,
    status: u16,
    retry_after: Option<String>,
    fails: bool,
}

#[derive(Default)]
struct Script {
    readiness: VecDeque<Ready>,
    answers: VecDeque<Answer>,
    calls: Vec<Duration>,
}

/// Clones share the script; each clone has its own readiness timer.
#[derive(Clone)]
struct Upstream {
    script: Arc<Mutex<Script>>,
    origin: Instant,
    waiting: Option<Arc<Mutex<Pin<Box<Sleep>>>>>,
}

impl Service<Request<()>> for Upstream {
    type Response = Response<()>;
    type Error = Broken;
    type Future = Pin<Box<dyn Future<Output = Result<Response<()>, Broken>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Broken>> {
        if let Some(waiting) = &self.waiting {
            if waiting.lock().unwrap().as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.waiting = None;
            return Poll::Ready(Ok(()));
        }
        let next = self.script.lock().unwrap().readiness.pop_front();
        match next.unwrap_or(Ready::Now) {
            Ready::Now => Poll::Ready(Ok(())),
            Ready::Fails => Poll::Ready(Err(Broken)),
            Ready::After(d) => {
                self.waiting = Some(Arc::new(Mutex::new(Box::pin(sleep(d)))));
                self.poll_ready(cx)
            }
        }
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        let mut script = self.script.lock().unwrap();
        script.calls.push(self.origin.elapsed());
        let answer = script.answers.pop_front().unwrap_or(Answer {
            after: Duration::ZERO,
            status: 200,
            retry_after: None,
            fails: false,
        });
        Box::pin(async move {
            sleep(answer.after).await;
            if answer.fails {
                return Err(Broken);
            }
            let mut response = Response::builder().status(answer.status);
            if let Some(value) = &answer.retry_after {
                response = response.header("retry-after", value.as_str());
            }
            Ok(response.body(()).unwrap())
        })
    }
}

/// What the observer was told.
#[derive(Clone, Default)]
struct Told {
    events: Arc<Mutex<Vec<(ActionId, Event)>>>,
    reports: Arc<Mutex<Vec<(ActionId, Report)>>>,
}

impl Observer for Told {
    fn on_event(&self, id: ActionId, event: &Event) {
        self.events.lock().unwrap().push((id, event.clone()));
    }

    fn on_report(&self, id: ActionId, report: &Report) {
        self.reports.lock().unwrap().push((id, report.clone()));
    }
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        4 => (0u64..3_000).prop_map(Duration::from_millis),
        1 => (0u64..30_000).prop_map(Duration::from_millis),
        1 => Just(Duration::ZERO),
    ]
}

fn retry_after() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        (0u64..40).prop_map(|s| Some(s.to_string())),
        Just(Some("99999999999999999999".to_owned())),
        Just(Some("9223372036854775807".to_owned())),
        Just(Some("-1".to_owned())),
        Just(Some("Mon, 01 Jan 2024 12:00:00 GMT".to_owned())),
    ]
}

fn answer() -> impl Strategy<Value = Answer> {
    (
        duration(),
        prop_oneof![4 => Just(429u16), 1 => Just(200u16), 1 => Just(503u16)],
        retry_after(),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(after, status, retry_after, fails)| Answer {
            after,
            status,
            retry_after,
            fails,
        })
}

fn ready() -> impl Strategy<Value = Ready> {
    prop_oneof![
        6 => Just(Ready::Now),
        1 => Just(Ready::Fails),
        2 => duration().prop_map(Ready::After),
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    let budget = prop_oneof![
        4 => (1u64..60).prop_map(Duration::from_secs),
        1 => Just(Duration::MAX),
    ];
    (budget, 1u32..5, 0u64..8_000).prop_filter_map("cap fits", |(budget, attempts, cap)| {
        Policy::builder()
            .total_budget(budget)
            .max_attempts(attempts)
            .attempt_cap(Duration::from_millis(cap).min(budget))
            .build()
            .ok()
    })
}

/// How long a case may run, in paused time, before the caller gives up
/// (drops the future): longer than any finite budget above.
const PATIENCE: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone)]
struct Case {
    policy: Policy,
    readiness: Vec<Ready>,
    answers: Vec<Answer>,
    hold_off: bool,
    /// None, tower's default budget (`false`), or one that refuses every
    /// retry (`true`).
    client_budget: Option<bool>,
    cancel_at: Option<Duration>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        policy(),
        prop::collection::vec(ready(), 0..6),
        prop::collection::vec(answer(), 0..6),
        any::<bool>(),
        prop::option::of(any::<bool>()),
        prop::option::weighted(0.2, duration()),
    )
        .prop_map(
            |(policy, readiness, answers, hold_off, client_budget, cancel_at)| Case {
                policy,
                readiness,
                answers,
                hold_off,
                client_budget,
                cancel_at,
            },
        )
}

/// Runs `actions` actions one after the other through one client (so that
/// a hold-off or a client budget one leaves is met by the next), checking
/// each; their reports. `observed`: with an observer (and seeded jitter),
/// which gives every action its core `Action` from the start; without,
/// an action that nobody else listens to starts without one.
fn run(case: &Case, actions: usize, observed: bool) -> Result<Vec<Report>, TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let script = Arc::new(Mutex::new(Script {
            readiness: case.readiness.iter().cloned().collect(),
            answers: case.answers.iter().cloned().collect(),
            calls: Vec::new(),
        }));
        let upstream = Upstream {
            script: script.clone(),
            origin: Instant::now(),
            waiting: None,
        };
        let told = Told::default();
        let mut layer = RetryBudgetLayer::new(case.policy);
        if observed {
            layer = layer.jitter_seed(7).observer(told.clone());
        }
        if case.hold_off {
            layer = layer.hold_off(HoldOff::default());
        }
        match case.client_budget {
            Some(false) => layer = layer.client_budget(ClientBudget::default()),
            // No reserve and 1 %: a retry is refused.
            Some(true) => {
                let none = Ratio::percent(1).unwrap();
                let stingy = ClientBudget::new(none, 0, Duration::from_secs(10)).unwrap();
                layer = layer.client_budget(stingy);
            }
            None => {}
        }
        let mut client = tower::Layer::layer(&layer, upstream);
        let mut all = Vec::new();
        for n in 0..actions {
            let calls_before = script.lock().unwrap().calls.len();
            let slot = ReportSlot::new();
            let token = CancellationToken::new();
            if let Some(at) = case.cancel_at {
                let token = token.clone();
                tokio::spawn(async move {
                    sleep(at).await;
                    token.cancel();
                });
            }
            let outcome = tokio::time::timeout(PATIENCE, async {
                poll_fn(|cx| Service::<Request<()>>::poll_ready(&mut client, cx)).await?;
                let mut request = Request::get("http://upstream.test/items").body(()).unwrap();
                request.extensions_mut().insert(slot.clone());
                request.extensions_mut().insert(token.clone());
                client.call(request).await
            })
            .await;

            let calls = script.lock().unwrap().calls.len() - calls_before;
            let reports = told.reports.lock().unwrap().clone();
            let told_report = if observed {
                prop_assert_eq!(
                    reports.len(),
                    n + 1,
                    "the observer gets one report per action"
                );
                let (id, told_report) = &reports[n];
                let events: Vec<Event> = told
                    .events
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|(event_id, _)| event_id == id)
                    .map(|(_, event)| event.clone())
                    .collect();
                prop_assert_eq!(&events, &told_report.events, "told as recorded");
                Some(told_report.clone())
            } else {
                None
            };
            let filled = slot.take();

            let report = match &outcome {
                Ok(Ok(response)) => {
                    let report = response.extensions().get::<Report>().cloned();
                    prop_assert!(report.is_some(), "a response carries its report");
                    let report = report.unwrap();
                    prop_assert_eq!(Some(response.status().as_u16()), report.last_status);
                    report
                }
                Ok(Err(error)) => {
                    let report = error.report().cloned();
                    prop_assert!(report.is_some(), "an error carries its report");
                    let report = report.unwrap();
                    prop_assert_eq!(error.outcome(), report.outcome);
                    report
                }
                // The caller gave up: the drop is the caller leaving.
                Err(_elapsed) => {
                    let report = told_report.clone().or_else(|| filled.clone());
                    prop_assert!(report.is_some(), "told or in the slot");
                    let report = report.unwrap();
                    prop_assert_eq!(report.outcome, Outcome::Cancelled);
                    report
                }
            };
            if let Some(told_report) = &told_report {
                prop_assert_eq!(&report, told_report);
            }
            match filled {
                Some(filled) => prop_assert_eq!(&filled, &report),
                // Only the caller's own poll_ready failing has no request,
                // so no slot.
                None => prop_assert_eq!(
                    (report.outcome, report.attempts_started),
                    (Outcome::TransportError, 0)
                ),
            }
            prop_assert_eq!(report.attempts_started as usize, calls);
            prop_assert!(report.attempts_started <= case.policy.max_attempts());
            for start in &report.starts() {
                let end = start.checked_add(case.policy.attempt_cap());
                prop_assert!(end.is_some_and(|end| end <= case.policy.total_budget()));
            }
            if report.outcome == Outcome::Success {
                prop_assert!(report.last_status.is_some_and(|s| (200..400).contains(&s)));
            }
            all.push(report);
        }
        Ok(all)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_adapter_always_ends_defined_and_reported(case in case()) {
        run(&case, 1, true)?;
    }

    #[test]
    fn so_does_the_next_action_through_the_same_client(case in case()) {
        run(&case, 3, true)?;
    }

    /// Unobserved, a first attempt starts without its core `Action`, which
    /// is created (the start replayed) only if needed: the reports are the
    /// ones an `Action` from the start gives (the policies here have no
    /// jitter, so the seed does not matter).
    #[test]
    fn an_action_deferred_reports_as_one_observed(case in case()) {
        let observed = run(&case, 2, true)?;
        let deferred = run(&case, 2, false)?;
        prop_assert_eq!(deferred, observed);
    }
}
