//! The bounds on a client connection, on the proxy port and the admin port.
//!
//! What hyper and tokio express is theirs:
//!
//! * HTTP/2 keep-alive PINGs (hyper's `keep_alive_interval` and
//!   `keep_alive_timeout`), which close a connection whose peer is gone;
//! * the connection limit, a tokio [`Semaphore`]: one permit per open
//!   connection, and a connection accepted without a free permit is closed
//!   at once.
//!
//! Hand-written, because none of them expresses it: the time before the
//! *first* request head (hyper-util's `auto` server reads the first bytes
//! to tell HTTP/1 from HTTP/2 with no timeout, and hyper's HTTP/2 server
//! waits for the preface and first HEADERS without one), and the idle time
//! of a connection with no request in flight (hyper has no idle timeout for
//! HTTP/2, and a peer that answers PINGs is never closed by them).
//! [`Activity`] counts the requests a connection has started and has in
//! flight (a request stays in flight until its response body is dropped),
//! and [`Activity::expired`] resolves when either bound is past; the
//! connection's task then drops the connection, which closes the socket.
//!
//! The same bounds time each *next* HTTP/1 head (`--header-timeout` from
//! the end of the last request, as nginx's `client_header_timeout`).
//! hyper's `header_read_timeout` would do it too, but with a boxed timer
//! made, registered and dropped for every head, a cost on every request;
//! here the connection's one timer is looked at only when it fires.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::args::ConnectionLimits;
use super::metrics::Metrics;

/// The connection limit of one port.
#[derive(Debug, Clone)]
pub struct Gate {
    permits: Arc<Semaphore>,
    max: usize,
    /// `proxy` or `admin` (a metric label).
    port: &'static str,
    metrics: Metrics,
}

impl Gate {
    /// At most `max` connections open at once on `port`.
    pub fn new(max: usize, port: &'static str, metrics: Metrics) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max)),
            max,
            port,
            metrics,
        }
    }

    /// The connections open now.
    pub fn open(&self) -> usize {
        self.max.saturating_sub(self.permits.available_permits())
    }

    /// A permit for a connection just accepted, or `None` if the port is
    /// full: the caller then drops the connection, which closes it.
    pub fn admit(&self) -> Option<OwnedSemaphorePermit> {
        let permit = self.permits.clone().try_acquire_owned().ok();
        if permit.is_none() {
            tracing::debug!(
                target: "retry_budget::proxy",
                port = self.port,
                "connection refused: the connection limit is reached"
            );
            self.metrics.connection_refused(self.port);
        }
        permit
    }

    /// Runs `connection` until it ends or one of its bounds is past (then
    /// drops it, closing the socket); the permit is given back at the end.
    pub async fn serve<F: Future>(
        &self,
        connection: F,
        activity: Activity,
        limits: ConnectionLimits,
        permit: OwnedSemaphorePermit,
    ) {
        let never = (std::future::pending::<()>(), (|_| {}) as fn(Pin<&mut F>));
        self.serve_draining(connection, never, activity, limits, permit)
            .await;
    }

    /// As [`Self::serve`], and once `stop` resolves, `drain` is called on
    /// the connection (which then finishes its requests and closes) and it
    /// is run on to its end. `stop` is polled as the bounds are: only when
    /// it wakes the task, not on every wake of the connection.
    pub async fn serve_draining<F: Future, S: Future>(
        &self,
        connection: F,
        (stop, drain): (S, fn(Pin<&mut F>)),
        activity: Activity,
        limits: ConnectionLimits,
        permit: OwnedSemaphorePermit,
    ) {
        let _permit = permit;
        let bounded = Bounded::draining(connection, activity.expired(limits), (stop, drain));
        if let Some(expired) = bounded.await {
            tracing::debug!(
                target: "retry_budget::proxy",
                port = self.port,
                reason = expired.as_str(),
                "connection closed by its bounds"
            );
            self.metrics.connection_closed(self.port, expired.as_str());
        }
    }
}

pin_project! {
    /// A connection run beside its bounds: `None` when the connection
    /// ends, `Some` with the bounds' word when they resolve first (the
    /// connection is then dropped).
    ///
    /// Hand-written, because `select!` (tokio's or futures') polls every
    /// branch on every wake of the task, and the connection's task wakes
    /// several times per request, while the bounds need polling only when
    /// their own timer or notification fires: the bounds are polled with a
    /// waker of their own ([`BoundsWoken`]), and only after it was woken.
    struct Bounded<C, B, S> {
        #[pin]
        connection: C,
        #[pin]
        bounds: B,
        // Polled as the bounds are, until it resolves; then `drain` is
        // called on the connection once.
        #[pin]
        stop: S,
        drain: Option<fn(Pin<&mut C>)>,
        woken: Arc<BoundsWoken>,
        // The task's waker last given to `woken`, to see a change without
        // taking its lock.
        registered: Option<Waker>,
    }
}

#[cfg(test)]
impl<C, B> Bounded<C, B, std::future::Pending<()>> {
    /// A connection that is never drained.
    fn new(connection: C, bounds: B) -> Self {
        Self::draining(connection, bounds, (std::future::pending(), |_| {}))
    }
}

impl<C, B, S> Bounded<C, B, S> {
    fn draining(connection: C, bounds: B, (stop, drain): (S, fn(Pin<&mut C>))) -> Self {
        Self {
            connection,
            bounds,
            stop,
            drain: Some(drain),
            woken: Arc::new(BoundsWoken {
                // Polled once at first, to arm the timer.
                fired: AtomicBool::new(true),
                task: Mutex::new(None),
            }),
            registered: None,
        }
    }
}

impl<C: Future, B: Future, S: Future> Future for Bounded<C, B, S> {
    type Output = Option<B::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if !this
            .registered
            .as_ref()
            .is_some_and(|waker| waker.will_wake(cx.waker()))
        {
            *this
                .woken
                .task
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
            *this.registered = Some(cx.waker().clone());
        }
        // Read after the task's waker is in place: a wake after this
        // read wakes the task, which polls again.
        let fired = this.woken.fired.swap(false, Ordering::AcqRel);
        let waker = fired.then(|| Waker::from(this.woken.clone()));
        if let Some(waker) = &waker {
            // Before the connection is polled, so that it sees the drain
            // at once.
            if this.drain.is_some() && this.stop.poll(&mut Context::from_waker(waker)).is_ready() {
                if let Some(drain) = this.drain.take() {
                    drain(this.connection.as_mut());
                }
            }
        }
        if this.connection.poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        if let Some(waker) = &waker {
            if let Poll::Ready(expired) = this.bounds.poll(&mut Context::from_waker(waker)) {
                return Poll::Ready(Some(expired));
            }
        }
        Poll::Pending
    }
}

/// The bounds' waker: marks them to be polled, and wakes the connection's
/// task.
struct BoundsWoken {
    fired: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for BoundsWoken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        let task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(task) = task.as_ref() {
            task.wake_by_ref();
        }
    }
}

/// Why a connection was closed by its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// No complete request head within `--header-timeout` of the accept.
    NoFirstRequest,
    /// An HTTP/1 connection: no complete next request head within
    /// `--header-timeout` of the end of the last request (when that is
    /// shorter than `--idle-timeout`).
    NoNextRequest,
    /// No request in flight for `--idle-timeout`.
    Idle,
}

impl Expired {
    /// The `snake_case` name (a metric label).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NoFirstRequest | Self::NoNextRequest => "header_timeout",
            Self::Idle => "idle",
        }
    }
}

/// What a connection's requests have done, in atomics its task reads
/// (one connection's requests all run on its task's thread, so these are
/// never contended).
#[derive(Debug)]
struct Counts {
    /// Requests started.
    started: AtomicU64,
    /// Requests in flight.
    in_flight: AtomicUsize,
    /// Whether the bounds time each next request head (an HTTP/1
    /// connection whose heads hyper does not time).
    next_heads: AtomicBool,
    /// When the last request in flight ended, as nanoseconds after
    /// `origin`.
    idle_since: AtomicU64,
    origin: Instant,
    /// Told once, when the first request starts.
    first: Notify,
}

/// The requests of one connection; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Activity(Arc<Counts>);

impl Default for Activity {
    fn default() -> Self {
        Self(Arc::new(Counts {
            started: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            next_heads: AtomicBool::new(false),
            idle_since: AtomicU64::new(0),
            origin: Instant::now(),
            first: Notify::new(),
        }))
    }
}

impl Activity {
    /// A request has arrived (its head is complete); it is in flight until
    /// the guard is dropped. `next_heads`, read from a connection's first
    /// request: whether the bounds time each next head (an HTTP/1
    /// connection whose heads hyper does not time itself).
    pub fn begin(&self, next_heads: bool) -> InFlight {
        self.0.in_flight.fetch_add(1, Ordering::Relaxed);
        if self.0.started.fetch_add(1, Ordering::Relaxed) == 0 {
            self.0.next_heads.store(next_heads, Ordering::Relaxed);
            // Kept as a permit if `expired` is not waiting yet.
            self.0.first.notify_one();
        }
        InFlight(self.clone())
    }

    /// Resolves when the connection is past one of its bounds: no first
    /// request within the header timeout, no request in flight for the
    /// idle timeout, or, on HTTP/1, no next request within the header
    /// timeout of the end of the last one (if shorter).
    ///
    /// Nothing wakes it per request: after the first request it sleeps
    /// until the earliest time the connection could be idle long enough
    /// (the end of the last request plus the bound, or, while a request is
    /// in flight, one bound later) and looks again.
    pub async fn expired(&self, limits: ConnectionLimits) -> Expired {
        let counts = &*self.0;
        if tokio::time::timeout(limits.header_timeout, counts.first.notified())
            .await
            .is_err()
            && counts.started.load(Ordering::Relaxed) == 0
        {
            return Expired::NoFirstRequest;
        }
        let (bound, why) = if counts.next_heads.load(Ordering::Relaxed)
            && limits.header_timeout < limits.idle_timeout
        {
            (limits.header_timeout, Expired::NoNextRequest)
        } else {
            (limits.idle_timeout, Expired::Idle)
        };
        loop {
            let now = Instant::now();
            let due = if counts.in_flight.load(Ordering::Relaxed) > 0 {
                tower_retry_budget::instant_at(now, bound)
            } else {
                let ended = Duration::from_nanos(counts.idle_since.load(Ordering::Relaxed));
                tower_retry_budget::instant_at(counts.origin, ended)
                    .and_then(|ended| tower_retry_budget::instant_at(ended, bound))
            };
            match due {
                Some(due) if due <= now => return why,
                Some(due) => tokio::time::sleep_until(due).await,
                // Past tokio's clock: never.
                None => std::future::pending().await,
            }
        }
    }
}

/// A request in flight on its connection (see [`Activity::begin`]).
#[derive(Debug)]
pub struct InFlight(Activity);

impl Drop for InFlight {
    fn drop(&mut self) {
        let counts = &*self.0 .0;
        if counts.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            let ended = Instant::now().saturating_duration_since(counts.origin);
            let nanos = u64::try_from(ended.as_nanos()).unwrap_or(u64::MAX);
            counts.idle_since.store(nanos, Ordering::Relaxed);
        }
    }
}

pin_project! {
    /// A request's handling, whose response body keeps the request in
    /// flight ([`Tracked`]); dropped before it answers, it ends the
    /// request's flight with it.
    pub struct Tracking<F> {
        #[pin]
        inner: F,
        in_flight: Option<InFlight>,
    }
}

impl<F> Tracking<F> {
    /// `inner`, its response holding `in_flight`.
    pub const fn new(inner: F, in_flight: InFlight) -> Self {
        Self {
            inner,
            in_flight: Some(in_flight),
        }
    }
}

impl<F, B, E> Future for Tracking<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<Tracked<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = std::task::ready!(this.inner.poll(cx))?;
        let in_flight = this.in_flight.take();
        let in_flight = in_flight.expect("`Tracking` polled after completion");
        Poll::Ready(Ok(response.map(|body| Tracked::new(body, in_flight))))
    }
}

pin_project! {
    /// A response body that keeps its request in flight until it is
    /// dropped.
    pub struct Tracked<B> {
        #[pin]
        inner: B,
        _in_flight: InFlight,
    }
}

impl<B> Tracked<B> {
    /// `inner`, holding `in_flight` until dropped.
    pub const fn new(inner: B, in_flight: InFlight) -> Self {
        Self {
            inner,
            _in_flight: in_flight,
        }
    }
}

impl<B: Body> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ConnectionLimits = ConnectionLimits {
        header_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(10),
    };

    #[tokio::test(start_paused = true)]
    async fn no_first_request_within_the_header_timeout() {
        let activity = Activity::default();
        let start = tokio::time::Instant::now();
        assert_eq!(activity.expired(LIMITS).await, Expired::NoFirstRequest);
        assert_eq!(start.elapsed(), LIMITS.header_timeout);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_end_of_the_last_request_in_flight() {
        let activity = Activity::default();
        let start = tokio::time::Instant::now();
        let a = activity.clone();
        let requests = tokio::spawn(async move {
            let first = a.begin(false);
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(first);
        });
        assert_eq!(activity.expired(LIMITS).await, Expired::Idle);
        assert_eq!(start.elapsed(), Duration::from_secs(40));
        requests.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_http1_connection_waits_for_its_next_head_at_most_the_header_timeout() {
        let activity = Activity::default();
        let start = tokio::time::Instant::now();
        let a = activity.clone();
        let requests = tokio::spawn(async move {
            let first = a.begin(true);
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(first);
            // A second request 4 s later, inside the header timeout.
            tokio::time::sleep(Duration::from_secs(4)).await;
            drop(a.begin(true));
        });
        assert_eq!(activity.expired(LIMITS).await, Expired::NoNextRequest);
        assert_eq!(start.elapsed(), Duration::from_secs(39));
        requests.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_header_timeout_past_the_idle_timeout_leaves_the_idle_bound() {
        let limits = ConnectionLimits {
            header_timeout: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(10),
        };
        let activity = Activity::default();
        let start = tokio::time::Instant::now();
        drop(activity.begin(true));
        assert_eq!(activity.expired(limits).await, Expired::Idle);
        assert_eq!(start.elapsed(), limits.idle_timeout);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bounds_end_a_connection_that_does_not_end() {
        let activity = Activity::default();
        let start = tokio::time::Instant::now();
        let bounded = Bounded::new(std::future::pending::<()>(), activity.expired(LIMITS));
        assert_eq!(bounded.await, Some(Expired::NoFirstRequest));
        assert_eq!(start.elapsed(), LIMITS.header_timeout);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_ends_first_ends_without_its_bounds() {
        let activity = Activity::default();
        let start = tokio::time::Instant::now();
        let connection = tokio::time::sleep(Duration::from_secs(1));
        assert_eq!(
            Bounded::new(connection, activity.expired(LIMITS)).await,
            None
        );
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_bounds_are_woken_by_their_own_timer_and_notification() {
        // The connection's own wakes (its sleep) and the bounds' (the first
        // request's notification, then the idle timer) come apart.
        let activity = Activity::default();
        let start = tokio::time::Instant::now();
        let a = activity.clone();
        let connection = async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let first = a.begin(false);
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(first);
            std::future::pending::<()>().await;
        };
        assert_eq!(
            Bounded::new(connection, activity.expired(LIMITS)).await,
            Some(Expired::Idle)
        );
        assert_eq!(start.elapsed(), Duration::from_secs(41));
    }
}
