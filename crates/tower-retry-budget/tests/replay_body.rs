//! Request bodies that are not `Clone`: replayed byte for byte (trailers
//! included) through `ReplayBodyLayer` above the retry layer; a body over the
//! replay limit goes through once and is not retried.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use retry_budget::{Outcome, Policy, Report};
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_retry_budget::{
    body_replay::{ReplayBody, ReplayBodyLayer, ReplayHandle},
    Idempotent, RetryBudgetLayer,
};

/// A streamed body that is not `Clone`: chunks, then trailers.
struct Streamed {
    chunks: VecDeque<Bytes>,
    trailers: Option<HeaderMap>,
}

impl Streamed {
    fn new(chunks: &[&'static [u8]], trailer: Option<&'static str>) -> Self {
        Self {
            chunks: chunks.iter().map(|c| Bytes::from_static(c)).collect(),
            trailers: trailer.map(|v| {
                let mut map = HeaderMap::new();
                map.insert("x-checksum", v.parse().unwrap());
                map
            }),
        }
    }
}

impl Body for Streamed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(chunk) = self.chunks.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }
}

/// What the upstream received on each attempt: body bytes and trailers.
type Received = Arc<Mutex<Vec<(Bytes, Option<HeaderMap>)>>>;

/// Reads `read_frames` frames of each request (all if `None`), answers 429
/// with Retry-After: 1 the first `fails` times, then 200.
fn upstream(
    received: Received,
    read_frames: Option<usize>,
    fails: usize,
) -> impl tower::Service<
    Request<ReplayBody<Streamed>>,
    Response = Response<()>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    service_fn(move |req: Request<ReplayBody<Streamed>>| {
        let received = received.clone();
        async move {
            let mut body = req.into_body();
            let mut bytes = Vec::new();
            let mut trailers = None;
            let mut frames = 0;
            while read_frames.is_none_or(|n| frames < n) {
                let Some(frame) = body.frame().await else {
                    break;
                };
                let frame = frame.unwrap();
                frames += 1;
                match frame.into_data() {
                    Ok(data) => bytes.extend_from_slice(&data),
                    Err(frame) => trailers = frame.into_trailers().ok(),
                }
            }
            let mut received = received.lock().unwrap();
            received.push((Bytes::from(bytes), trailers));
            let status = if received.len() <= fails { 429 } else { 200 };
            let res = Response::builder()
                .status(status)
                .header("retry-after", "1")
                .body(())
                .unwrap();
            Ok::<_, Infallible>(res)
        }
    })
}

fn report_of(response: &Response<()>) -> Report {
    response.extensions().get::<Report>().unwrap().clone()
}

#[tokio::test(start_paused = true)]
async fn a_streamed_get_body_is_replayed_byte_for_byte_with_trailers() {
    let received = Received::default();
    let client = ServiceBuilder::new()
        .layer(ReplayBodyLayer::new())
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(upstream(received.clone(), None, 1));
    let body = Streamed::new(&[b"palette=", b"coast", b"&size=3"], Some("c0ffee"));
    let response = client
        .oneshot(
            Request::get("http://upstream.test/search")
                .body(body)
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(report_of(&response).attempts_started, 2);
    let received = received.lock().unwrap();
    assert_eq!(received.len(), 2);
    assert_eq!(&received[0].0[..], b"palette=coast&size=3");
    assert_eq!(
        received[0], received[1],
        "the retry sent the same bytes and trailers"
    );
    assert_eq!(received[1].1.as_ref().unwrap()["x-checksum"], "c0ffee");
}

#[tokio::test(start_paused = true)]
async fn a_marked_post_is_replayed_even_when_the_first_attempt_read_only_part() {
    let received = Received::default();
    let client = ServiceBuilder::new()
        .layer(ReplayBodyLayer::new())
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(upstream(received.clone(), Some(1), 1));
    let mut request = Request::post("http://upstream.test/jobs")
        .header("idempotency-key", "job-1")
        .body(Streamed::new(&[b"a", b"b", b"c"], None))
        .unwrap();
    request.extensions_mut().insert(Idempotent);
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let received = received.lock().unwrap();
    // Attempt 1 read one frame; attempt 2 (also reading one frame) gets the
    // same first frame again, replayed.
    assert_eq!(&received[0].0[..], b"a");
    assert_eq!(&received[1].0[..], b"a");
}

#[tokio::test(start_paused = true)]
async fn a_body_over_the_limit_goes_once_and_the_report_says_why() {
    let received = Received::default();
    let client = ServiceBuilder::new()
        .layer(ReplayBodyLayer::new().limit(8))
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(upstream(received.clone(), None, 1));
    let body = Streamed::new(&[b"0123456789", b"abcdef"], None);
    let response = client
        .oneshot(
            Request::get("http://upstream.test/search")
                .body(body)
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 429, "the last response is returned");
    let report = report_of(&response);
    assert_eq!(report.outcome, Outcome::NotReplayable);
    assert_eq!(report.attempts_started, 1);
    assert!(report.to_string().contains("replay"), "{report}");
    let received = received.lock().unwrap();
    assert_eq!(received.len(), 1);
    assert_eq!(&received[0].0[..], b"0123456789abcdef", "sent once, whole");
}

#[test]
fn a_clone_replays_what_the_original_sent() {
    let original = ReplayBody::new(Streamed::new(&[b"x", b"y"], Some("t")), 1024);
    let copy = original.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let first = rt.block_on(original.collect()).unwrap();
    let second = rt.block_on(copy.collect()).unwrap();
    assert_eq!(first.trailers(), second.trailers());
    assert_eq!(first.to_bytes(), second.to_bytes());
}

/// Every attempt of a replayed body carries exactly the bytes the caller
/// sent, whichever way the attempts were made: the first attempt sent at
/// once, or held off by an earlier 429 to the same service (the request is
/// then kept for the first attempt, which sends a copy, and the last
/// attempt takes the never-polled original); one chunk or several
/// (`Content-Length` or chunked on the wire), with or without trailers.
#[tokio::test(start_paused = true)]
async fn every_attempt_of_a_replayed_body_carries_the_whole_body() {
    let bodies: [(&[&'static [u8]], Option<&'static str>); 3] = [
        (&[b"{\"amount\":100}"], None),
        (&[b"{\"amo", b"unt\":", b"100}"], None),
        (&[b"{\"amount\":100}"], Some("c0ffee")),
    ];
    for held in [false, true] {
        for (chunks, trailer) in bodies {
            let received = Received::default();
            let hold_off = tower_retry_budget::hold_off::HoldOff::default();
            if held {
                // An earlier 429 to this service set a hold of 1 s.
                let until = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
                hold_off.hold("http://upstream.test:80", until);
            }
            let client = ServiceBuilder::new()
                .layer(ReplayBodyLayer::new())
                .layer(RetryBudgetLayer::new(Policy::default()).hold_off(hold_off))
                .service(upstream(received.clone(), None, 2));
            let mut request = Request::post("http://upstream.test/payments")
                .header("idempotency-key", "pay-1")
                .body(Streamed::new(chunks, trailer))
                .unwrap();
            request.extensions_mut().insert(Idempotent);
            let response = client.oneshot(request).await.unwrap();
            let case = format!("held {held}, chunks {chunks:?}, trailer {trailer:?}");
            assert_eq!(response.status(), 200, "{case}");
            assert_eq!(report_of(&response).attempts_started, 3, "{case}");
            let received = received.lock().unwrap();
            assert_eq!(received.len(), 3, "{case}");
            for (attempt, (bytes, trailers)) in received.iter().enumerate() {
                assert_eq!(&bytes[..], b"{\"amount\":100}", "attempt {attempt}: {case}");
                assert_eq!(
                    trailers.as_ref().map(|t| t["x-checksum"].clone()),
                    trailer.map(http::HeaderValue::from_static),
                    "attempt {attempt}: {case}"
                );
            }
        }
    }
}

/// The body's own rule, whatever the order in which its copies are read:
/// the original read last, after copies that read the inner body, still
/// yields every byte and the trailers, and says so in `size_hint` and
/// `is_end_stream` before it is read.
#[test]
fn the_original_read_after_its_copies_replays_everything() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let original = ReplayBody::new(Streamed::new(&[b"ab", b"cd"], Some("t")), 1024);
    let first_copy = original.clone();
    let second_copy = original.clone();
    let first = rt.block_on(first_copy.collect()).unwrap();
    let second = rt.block_on(second_copy.collect()).unwrap();
    assert_eq!(original.size_hint().exact(), Some(4));
    assert!(!original.is_end_stream());
    let last = rt.block_on(original.collect()).unwrap();
    for (name, body) in [("second copy", second), ("original", last)] {
        assert_eq!(body.trailers(), first.trailers(), "{name}");
        assert_eq!(&body.to_bytes()[..], b"abcd", "{name}");
    }
}

/// A body that has already ended (a GET's) keeps nothing and puts no handle
/// in the request: every attempt, the retry included, gets an ended body,
/// and the action is retried as any other.
#[tokio::test(start_paused = true)]
async fn an_ended_body_is_retried_with_no_handle_and_every_copy_ends_at_once() {
    type Ended = http_body_util::Empty<Bytes>;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let upstream = service_fn({
        let seen = seen.clone();
        move |req: Request<ReplayBody<Ended>>| {
            let seen = seen.clone();
            async move {
                let handle = req.extensions().get::<ReplayHandle>().is_some();
                let ended = req.body().is_end_stream() && req.body().size_hint().exact() == Some(0);
                let bytes = req.into_body().collect().await.unwrap().to_bytes();
                let mut seen = seen.lock().unwrap();
                seen.push((handle, ended, bytes.len()));
                let status = if seen.len() == 1 { 429 } else { 200 };
                let res = Response::builder()
                    .status(status)
                    .header("retry-after", "1");
                Ok::<_, Infallible>(res.body(()).unwrap())
            }
        }
    });
    let client = ServiceBuilder::new()
        .layer(ReplayBodyLayer::new())
        .layer(RetryBudgetLayer::new(Policy::default()))
        .service(upstream);
    let request = Request::get("http://upstream.test/").body(Ended::new());
    let response = client.oneshot(request.unwrap()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(report_of(&response).outcome, Outcome::Success);
    assert_eq!(*seen.lock().unwrap(), [(false, true, 0), (false, true, 0)]);
}
