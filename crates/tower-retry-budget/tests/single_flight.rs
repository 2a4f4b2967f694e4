//! Single flight, one small scenario per test, under tokio's paused clock.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use retry_budget::{Outcome, Policy, Report};
use tokio::time::Instant;
use tokio_test::{assert_pending, assert_ready, task};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};
use tower_retry_budget::single_flight::{Error, Shared, SingleFlight, SingleFlightLayer};
use tower_retry_budget::RetryBudgetLayer;

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

/// An upstream that answers every call after `after` with `status` and
/// `body` (and `Retry-After: 1` on a 429); it counts its calls, and the
/// calls whose future was dropped before answering.
#[derive(Clone)]
struct Upstream {
    after: Duration,
    status: u16,
    body: &'static str,
    calls: Arc<AtomicUsize>,
    abandoned: Arc<AtomicUsize>,
    uris: Arc<Mutex<Vec<String>>>,
}

impl Upstream {
    fn new(after: Duration, status: u16, body: &'static str) -> Self {
        Self {
            after,
            status,
            body,
            calls: Arc::default(),
            abandoned: Arc::default(),
            uris: Arc::default(),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn abandoned(&self) -> usize {
        self.abandoned.load(Ordering::SeqCst)
    }
}

/// Counts a call as abandoned if dropped before it answered.
struct Abandon(Option<Arc<AtomicUsize>>);

impl Abandon {
    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if let Some(count) = self.0.take() {
            count.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl<B> Service<Request<B>> for Upstream {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.uris.lock().unwrap().push(req.uri().to_string());
        let guard = Abandon(Some(self.abandoned.clone()));
        let (after, status, body) = (self.after, self.status, self.body);
        Box::pin(async move {
            tokio::time::sleep(after).await;
            guard.answered();
            let mut res = Response::builder().status(status);
            if status == 429 {
                res = res.header("retry-after", "1");
            }
            Ok(res
                .body(Full::new(Bytes::from_static(body.as_bytes())))
                .unwrap())
        })
    }
}

fn get(uri: &str) -> Request<()> {
    Request::get(uri).body(()).unwrap()
}

async fn text<B>(response: Response<B>) -> String
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn ten_identical_gets_cause_one_upstream_call() {
    let upstream = Upstream::new(s(1), 200, "palettes");
    let client = ServiceBuilder::new()
        .layer(SingleFlightLayer::new())
        .service(upstream.clone());
    let mut futures: Vec<_> = (0..10)
        .map(|_| task::spawn(client.clone().oneshot(get("http://up.test/palettes"))))
        .collect();
    for future in &mut futures {
        assert_pending!(future.poll());
    }
    assert_eq!(upstream.calls(), 1);
    assert_eq!(client.in_flight(), 1);
    tokio::time::advance(s(1)).await;
    for future in &mut futures {
        let response = assert_ready!(future.poll()).unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.extensions().get::<Shared>().unwrap().callers, 10);
        assert!(response.body().is_shared());
        assert_eq!(text(response).await, "palettes");
    }
    assert_eq!(upstream.calls(), 1);
    assert_eq!(client.in_flight(), 0, "forgotten once done");
}

#[tokio::test(start_paused = true)]
async fn a_coalesced_caller_leaving_does_not_cancel_the_others() {
    let upstream = Upstream::new(s(2), 200, "ok");
    let client = SingleFlightLayer::new().layer(upstream.clone());
    let mut first = task::spawn(client.clone().oneshot(get("http://up.test/a")));
    let mut second = task::spawn(client.clone().oneshot(get("http://up.test/a")));
    let mut third = task::spawn(client.clone().oneshot(get("http://up.test/a")));
    assert_pending!(first.poll());
    assert_pending!(second.poll());
    assert_pending!(third.poll());
    tokio::time::advance(s(1)).await;
    // The caller whose poll drove the upstream call so far leaves.
    drop(first);
    assert_eq!(upstream.abandoned(), 0);
    tokio::time::advance(s(1)).await;
    assert!(
        second.is_woken() || third.is_woken(),
        "the others are woken"
    );
    let second = assert_ready!(second.poll()).unwrap();
    let third = assert_ready!(third.poll()).unwrap();
    assert_eq!(upstream.calls(), 1);
    assert_eq!(upstream.abandoned(), 0);
    // Two were still there when the answer came.
    assert_eq!(second.extensions().get::<Shared>().unwrap().callers, 2);
    assert_eq!(text(third).await, "ok");
}

#[tokio::test(start_paused = true)]
async fn when_the_last_caller_leaves_the_shared_action_is_dropped() {
    let upstream = Upstream::new(s(5), 200, "ok");
    let client = SingleFlightLayer::new().layer(upstream.clone());
    let mut a = task::spawn(client.clone().oneshot(get("http://up.test/a")));
    let mut b = task::spawn(client.clone().oneshot(get("http://up.test/a")));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    drop(a);
    assert_eq!(upstream.abandoned(), 0, "b still waits");
    drop(b);
    assert_eq!(upstream.abandoned(), 1, "dropped at once, not later");
    assert_eq!(client.in_flight(), 0);
    // A new request starts a new action.
    let response = client
        .clone()
        .oneshot(get("http://up.test/a"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(upstream.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_last_caller_leaving_cancels_the_budgeted_action_and_its_retries() {
    let upstream = Upstream::new(s(1), 429, "");
    let client = ServiceBuilder::new()
        .layer(SingleFlightLayer::new())
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(upstream.clone());
    let mut a = task::spawn(client.clone().oneshot(get("http://up.test/a")));
    let mut b = task::spawn(client.clone().oneshot(get("http://up.test/a")));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    tokio::time::advance(s(1)).await; // 429: waiting 1 s for the retry
    assert_pending!(a.poll());
    drop(a);
    drop(b);
    tokio::time::advance(s(60)).await;
    assert_eq!(upstream.calls(), 1, "no retry after everyone left");
}

#[tokio::test(start_paused = true)]
async fn unsafe_methods_are_never_coalesced() {
    let upstream = Upstream::new(s(1), 201, "created");
    let client = SingleFlightLayer::new()
        .key(|parts: &Parts| Some(parts.uri.path().to_owned()))
        .layer(upstream.clone());
    let post = || {
        Request::builder()
            .method(Method::POST)
            .uri("http://up.test/jobs")
            .body(())
            .unwrap()
    };
    let mut futures: Vec<_> = (0..3)
        .map(|_| task::spawn(client.clone().oneshot(post())))
        .collect();
    for future in &mut futures {
        assert_pending!(future.poll());
    }
    assert_eq!(upstream.calls(), 3);
    assert_eq!(client.in_flight(), 0);
    tokio::time::advance(s(1)).await;
    for future in &mut futures {
        let response = assert_ready!(future.poll()).unwrap();
        assert!(response.extensions().get::<Shared>().is_none());
        assert!(!response.body().is_shared(), "streamed, not buffered");
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_beyond_the_limit_is_an_error_for_every_caller_never_truncated() {
    let upstream = Upstream::new(s(1), 200, "a body of 24 bytes, long");
    let client = SingleFlightLayer::new()
        .body_limit(8)
        .layer(upstream.clone());
    let (a, b) = tokio::join!(
        client.clone().oneshot(get("http://up.test/big")),
        client.clone().oneshot(get("http://up.test/big")),
    );
    for result in [a, b] {
        let error = result.unwrap_err();
        assert!(error.is_body_too_large());
        assert!(matches!(
            error,
            Error::BodyTooLarge {
                limit: 8,
                status: StatusCode::OK
            }
        ));
        assert!(error.to_string().contains("never truncated"), "{error}");
    }
    assert_eq!(upstream.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_error_is_shared_too() {
    #[derive(Debug)]
    struct Refused;
    impl std::fmt::Display for Refused {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("connection refused")
        }
    }
    impl std::error::Error for Refused {}
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let upstream = tower::service_fn(move |_: Request<()>| {
        counter.fetch_add(1, Ordering::SeqCst);
        async {
            tokio::time::sleep(s(1)).await;
            Err::<Response<Full<Bytes>>, _>(Refused)
        }
    });
    let client = SingleFlightLayer::new().layer(upstream);
    let (a, b) = tokio::join!(
        client.clone().oneshot(get("http://up.test/a")),
        client.clone().oneshot(get("http://up.test/a")),
    );
    let (a, b) = (a.unwrap_err(), b.unwrap_err());
    assert_eq!(a.to_string(), "connection refused");
    let (Error::Service(a), Error::Service(b)) = (a, b) else {
        panic!("service errors")
    };
    assert!(Arc::ptr_eq(&a, &b), "one error, shared");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn different_requests_are_separate_flights() {
    let upstream = Upstream::new(s(1), 200, "ok");
    let client = SingleFlightLayer::new().layer(upstream.clone());
    let (a, b, c) = tokio::join!(
        client.clone().oneshot(get("http://up.test/a")),
        client.clone().oneshot(get("http://up.test/b")),
        client.clone().oneshot(get("http://up.test/a?page=2")),
    );
    assert!(a.is_ok() && b.is_ok() && c.is_ok());
    assert_eq!(upstream.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_custom_key_decides_what_is_identical_and_none_opts_out() {
    let upstream = Upstream::new(s(1), 200, "ok");
    // The path only: the query string is only tracking here.
    let by_path = SingleFlightLayer::new()
        .key(|parts: &Parts| Some(parts.uri.path().to_owned()))
        .layer(upstream.clone());
    let (a, b) = tokio::join!(
        by_path.clone().oneshot(get("http://up.test/a?utm=1")),
        by_path.clone().oneshot(get("http://up.test/a?utm=2")),
    );
    assert!(a.is_ok() && b.is_ok());
    assert_eq!(upstream.calls(), 1);

    let never = SingleFlightLayer::new()
        .key(|_: &Parts| None::<()>)
        .layer(upstream.clone());
    let (a, b) = tokio::join!(
        never.clone().oneshot(get("http://up.test/a")),
        never.clone().oneshot(get("http://up.test/a")),
    );
    assert!(a.is_ok() && b.is_ok());
    assert_eq!(upstream.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn the_report_says_the_result_was_shared() {
    let upstream = Upstream::new(s(1), 200, "ok");
    let client = ServiceBuilder::new()
        .layer(SingleFlightLayer::new())
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(upstream.clone());
    let (a, b, c) = tokio::join!(
        client.clone().oneshot(get("http://up.test/a")),
        client.clone().oneshot(get("http://up.test/a")),
        client.clone().oneshot(get("http://up.test/a")),
    );
    for response in [a.unwrap(), b.unwrap(), c.unwrap()] {
        let report = response.extensions().get::<Report>().unwrap();
        assert_eq!(report.outcome, Outcome::Success);
        assert_eq!(report.shared_with, 2);
        assert_eq!(report.to_json()["shared_with"], 2);
        assert_eq!(
            report.to_string().lines().last(),
            Some("Shared: 3 identical requests received this one result.")
        );
    }
    assert_eq!(upstream.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn callers_share_the_whole_budgeted_action_retries_included() {
    // 429 (Retry-After: 1) then 200: one action, two upstream calls, for
    // every caller.
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let upstream = tower::service_fn(move |_: Request<()>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(s(1)).await;
            let res = if n == 0 {
                Response::builder().status(429).header("retry-after", "1")
            } else {
                Response::builder().status(200)
            };
            Ok::<_, Infallible>(res.body(Full::new(Bytes::from_static(b"ok"))).unwrap())
        }
    });
    let client = ServiceBuilder::new()
        .layer(SingleFlightLayer::new())
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(upstream);
    let started = Instant::now();
    let mut first = task::spawn(client.clone().oneshot(get("http://up.test/a")));
    assert_pending!(first.poll());
    tokio::time::advance(s(1)).await; // the 429 arrives; waiting until 2 s
    assert_pending!(first.poll());
    // A second caller arrives during the wait: it joins, no new action.
    let mut second = task::spawn(client.clone().oneshot(get("http://up.test/a")));
    assert_pending!(second.poll());
    tokio::time::advance(s(1)).await;
    assert_pending!(first.poll());
    tokio::time::advance(s(1)).await;
    let a = assert_ready!(first.poll()).unwrap();
    let b = assert_ready!(second.poll()).unwrap();
    assert_eq!(started.elapsed(), s(3));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    for response in [a, b] {
        assert_eq!(response.status(), 200);
        let report = response.extensions().get::<Report>().unwrap();
        assert_eq!(report.attempts_started, 2);
        assert_eq!(report.shared_with, 1);
    }
}

#[tokio::test(start_paused = true)]
async fn joiners_take_no_slot_of_a_gate_below() {
    // Gate of 1 below single flight: ten identical requests need one slot.
    let upstream = Upstream::new(s(1), 200, "ok");
    let client: SingleFlight<_> = ServiceBuilder::new()
        .layer(SingleFlightLayer::new())
        .concurrency_limit(1)
        .service(upstream.clone());
    let results = futures_join_all(
        (0..10)
            .map(|_| client.clone().oneshot(get("http://up.test/a")))
            .collect(),
    )
    .await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(upstream.calls(), 1);
}

/// Awaits every future (they run concurrently in one task).
async fn futures_join_all<F: Future + Unpin>(mut futures: Vec<F>) -> Vec<F::Output> {
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match Pin::new(&mut *future).poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(Option::unwrap).collect()
}

// ---- bounded sharing ----

/// A response body that sends `first` at once, then nothing until `stall`
/// has passed, then `rest`; it records when it was dropped.
struct SlowBody {
    first: Option<Bytes>,
    stall: Pin<Box<tokio::time::Sleep>>,
    rest: Option<Bytes>,
    dropped: Arc<Mutex<Option<Instant>>>,
}

impl http_body::Body for SlowBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(first))));
        }
        std::task::ready!(self.stall.as_mut().poll(cx));
        Poll::Ready(
            self.rest
                .take()
                .map(|rest| Ok(http_body::Frame::data(rest))),
        )
    }
}

impl Drop for SlowBody {
    fn drop(&mut self) {
        *self.dropped.lock().unwrap() = Some(Instant::now());
    }
}

type SlowUpstream = tower::util::BoxCloneSyncService<Request<()>, Response<SlowBody>, Infallible>;

/// An upstream whose head comes after 1 s and whose body then stalls for
/// `stall`; it counts its calls.
fn slow_body_upstream(
    stall: Duration,
    calls: &Arc<AtomicUsize>,
    dropped: &Arc<Mutex<Option<Instant>>>,
) -> SlowUpstream {
    let (calls, dropped) = (calls.clone(), dropped.clone());
    tower::util::BoxCloneSyncService::new(tower::service_fn(move |_req: Request<()>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let dropped = dropped.clone();
        async move {
            tokio::time::sleep(s(1)).await;
            Ok::<_, Infallible>(Response::new(SlowBody {
                first: Some(Bytes::from_static(b"par")),
                stall: Box::pin(tokio::time::sleep(stall)),
                rest: Some(Bytes::from_static(b"tial")),
                dropped,
            }))
        }
    }))
}

#[tokio::test(start_paused = true)]
async fn a_slow_shared_body_ends_every_caller_at_the_leaders_deadline() {
    // The leader's attempt starts at 0 with a 4 s cap: its reservation ends
    // at 4 s, inside its 20 s budget. The head comes at 1 s, the body
    // stalls for 100 s. A joiner comes at 2 s, mid-body.
    let calls = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(Mutex::new(None));
    let client = ServiceBuilder::new()
        .layer(SingleFlightLayer::new())
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(slow_body_upstream(s(100), &calls, &dropped));
    let start = Instant::now();
    let leader = tokio::spawn(client.clone().oneshot(get("http://up.test/slow")));
    tokio::time::sleep(s(2)).await;
    assert_eq!(client.in_flight(), 1, "the body is still being read");
    let joiner = tokio::spawn(client.clone().oneshot(get("http://up.test/slow")));
    for caller in [leader, joiner] {
        let error = caller.await.unwrap().unwrap_err();
        assert!(error.is_body_timeout(), "{error:?}");
        assert!(matches!(error, Error::BodyTimeout { status } if status == StatusCode::OK));
    }
    assert_eq!(
        start.elapsed(),
        s(4),
        "at the end of the leader's reservation"
    );
    assert_eq!(
        *dropped.lock().unwrap(),
        Some(start + s(4)),
        "the upstream body was dropped then, not read on"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(client.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn without_a_budget_inside_the_body_timeout_bounds_the_read() {
    let calls = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(Mutex::new(None));
    // A body that takes 2 s fits in a 3 s body timeout...
    let client = SingleFlightLayer::new()
        .body_timeout(s(3))
        .layer(slow_body_upstream(s(2), &calls, &dropped));
    let response = client
        .clone()
        .oneshot(get("http://up.test/a"))
        .await
        .unwrap();
    assert_eq!(text(response).await, "partial");
    // ...one that takes 5 s does not: every caller gets the error 3 s after
    // the head (at 1 s).
    let client = SingleFlightLayer::new()
        .body_timeout(s(3))
        .layer(slow_body_upstream(s(5), &calls, &dropped));
    let start = Instant::now();
    let (a, b) = tokio::join!(
        client.clone().oneshot(get("http://up.test/a")),
        client.clone().oneshot(get("http://up.test/a")),
    );
    assert!(a.unwrap_err().is_body_timeout() && b.unwrap_err().is_body_timeout());
    assert_eq!(start.elapsed(), s(4));
    // Any timeout is accepted: past the clock's range is no bound at all.
    let client = SingleFlightLayer::new()
        .body_timeout(Duration::MAX)
        .layer(slow_body_upstream(s(5), &calls, &dropped));
    let response = client.oneshot(get("http://up.test/a")).await.unwrap();
    assert_eq!(text(response).await, "partial");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn beyond_the_key_cap_a_new_key_runs_alone_not_shared() {
    let upstream = Upstream::new(s(2), 200, "ok");
    let client = SingleFlightLayer::new().max_keys(2).layer(upstream.clone());
    let mut a = task::spawn(client.clone().oneshot(get("http://up.test/a")));
    let mut b = task::spawn(client.clone().oneshot(get("http://up.test/b")));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    assert_eq!(client.in_flight(), 2);
    // Two more /c while the map is full: each runs alone, streamed.
    let mut c1 = task::spawn(client.clone().oneshot(get("http://up.test/c")));
    let mut c2 = task::spawn(client.clone().oneshot(get("http://up.test/c")));
    // A key already in flight is still joined.
    let mut a2 = task::spawn(client.clone().oneshot(get("http://up.test/a")));
    for t in [&mut c1, &mut c2, &mut a2] {
        assert_pending!(t.poll());
    }
    assert_eq!(client.in_flight(), 2, "the cap holds");
    tokio::time::advance(s(2)).await;
    for t in [&mut c1, &mut c2] {
        let response = assert_ready!(t.poll()).unwrap();
        assert!(!response.body().is_shared(), "not shared: streamed");
        assert!(response.extensions().get::<Shared>().is_none());
        assert_eq!(text(response).await, "ok");
    }
    let a = assert_ready!(a.poll()).unwrap();
    assert_eq!(a.extensions().get::<Shared>().unwrap().callers, 2);
    assert_ready!(a2.poll()).unwrap();
    assert_ready!(b.poll()).unwrap();
    let uris = upstream.uris.lock().unwrap().clone();
    let count = |path: &str| uris.iter().filter(|u| u.ends_with(path)).count();
    assert_eq!((count("/a"), count("/b"), count("/c")), (1, 1, 2));
    assert_eq!(client.in_flight(), 0);
    // With room again, /c is shared.
    let (c1, c2) = tokio::join!(
        client.clone().oneshot(get("http://up.test/c")),
        client.clone().oneshot(get("http://up.test/c")),
    );
    assert!(c1.unwrap().body().is_shared() && c2.unwrap().body().is_shared());
    assert_eq!(upstream.calls(), 5);
    // A cap of 0 shares nothing.
    let never = SingleFlightLayer::new().max_keys(0).layer(upstream.clone());
    let (x, y) = tokio::join!(
        never.clone().oneshot(get("http://up.test/x")),
        never.clone().oneshot(get("http://up.test/x")),
    );
    assert!(!x.unwrap().body().is_shared() && !y.unwrap().body().is_shared());
    assert_eq!(upstream.calls(), 7);
}

#[test]
fn a_joiner_is_never_blocked_while_the_flight_is_being_polled() {
    // The upstream's future blocks inside its poll (on another thread)
    // until the test lets it go. A joiner polled meanwhile must return
    // Pending at once, not wait for a lock held across that poll.
    use std::sync::mpsc;
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(Mutex::new(release_rx));
    let upstream = tower::service_fn(move |_req: Request<()>| {
        let entered_tx = entered_tx.clone();
        let release_rx = release_rx.clone();
        std::future::poll_fn(move |_cx| {
            let _ = entered_tx.send(());
            // Bounded only so that a regression fails instead of hanging.
            let _ = release_rx.lock().unwrap().recv_timeout(s(10));
            Poll::Ready(Ok::<_, Infallible>(Response::new(Full::new(
                Bytes::from_static(b"ok"),
            ))))
        })
    });
    let client = SingleFlightLayer::new().layer(upstream);
    let mut leader = task::spawn(client.clone().oneshot(get("http://up.test/a")));
    let polling = std::thread::spawn(move || {
        let response = assert_ready!(leader.poll()).unwrap();
        response.extensions().get::<Shared>().unwrap().callers
    });
    entered_rx.recv().unwrap();
    // The leader is inside the upstream's poll now.
    let mut joiner = task::spawn(client.clone().oneshot(get("http://up.test/a")));
    assert_pending!(joiner.poll(), "no lock held across the shared poll");
    release_tx.send(()).unwrap();
    assert_eq!(polling.join().unwrap(), 2, "the joiner was counted");
    assert!(joiner.is_woken());
    let response = assert_ready!(joiner.poll()).unwrap();
    assert_eq!(response.extensions().get::<Shared>().unwrap().callers, 2);
}
