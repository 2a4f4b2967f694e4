//! [`PeekFuture`]: the head, then the first body frame (a gRPC answer whose
//! status is still to come) or the body up to a bound, under a deadline (a
//! retried status with a JSON body).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Buf;
use http::Response;
use http_body::{Body, Frame};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::body::{Ended, Held};
use super::json::{self, JsonRules};
use super::late::Listeners;
use super::{grpc, BodySignals, PeekBody};

pin_project! {
    /// The response future of [`Peek`](super::Peek).
    pub struct PeekFuture<F, B>
    where
        B: Body,
    {
        #[pin]
        kind: Kind<F, B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B>
    where
        B: Body,
    {
        /// A call the retry layer does not budget: no look at the response.
        Passthrough {
            #[pin]
            future: F,
        },
        /// Waiting for the head.
        Head {
            #[pin]
            future: F,
            grpc: bool,
            json: Option<Arc<JsonRules>>,
            deadline: Option<Instant>,
            listeners: Listeners,
        },
        /// A gRPC head without `grpc-status`: reading the first frame.
        FirstFrame {
            response: Option<Response<B>>,
            listeners: Listeners,
        },
        /// A JSON body being read, boxed: a call that reads none (every
        /// gRPC call) moves a future of the head's size only.
        Reading {
            read: Pin<Box<JsonRead<B>>>,
        },
    }
}

pin_project! {
    /// A JSON read: what was read, and the bound in time.
    #[project = JsonReadProj]
    struct JsonRead<B>
    where
        B: Body,
    {
        response: Option<Response<B>>,
        held: Held<B::Data>,
        copy: Vec<u8>,
        json: Arc<JsonRules>,
        #[pin]
        timer: Sleep,
    }
}

impl<F, B: Body> PeekFuture<F, B> {
    pub(super) const fn passthrough(future: F) -> Self {
        Self {
            kind: Kind::Passthrough { future },
        }
    }

    pub(super) const fn peeking(
        future: F,
        grpc: bool,
        json: Option<Arc<JsonRules>>,
        deadline: Option<Instant>,
        listeners: Listeners,
    ) -> Self {
        Self {
            kind: Kind::Head {
                future,
                grpc,
                json,
                deadline,
                listeners,
            },
        }
    }
}

/// The most frames a JSON read holds: a body that sends more (of at most
/// `max_body` bytes in all) is passed on unclassified.
const MAX_FRAMES: usize = 1024;

/// What one poll of a JSON body came to.
enum Step<E> {
    /// Keep reading.
    More,
    /// Stop reading, and classify what was read if `true`.
    Done { classify: bool, ended: Ended<E> },
}

impl<F, B, E> Future for PeekFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body + Unpin,
{
    type Output = Result<Response<PeekBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut kind = self.project().kind;
        loop {
            match kind.as_mut().project() {
                KindProj::Passthrough { future } => {
                    let response = ready!(future.poll(cx))?;
                    return Poll::Ready(Ok(response.map(PeekBody::untouched)));
                }
                KindProj::Head {
                    future,
                    grpc,
                    json,
                    deadline,
                    listeners,
                } => {
                    let mut response = ready!(future.poll(cx))?;
                    let status = response.status();
                    if *grpc {
                        let ended = response.body().is_end_stream();
                        if grpc::awaits_status(status, response.headers(), ended) {
                            // The first frame is often at hand already: read
                            // it now, without parking the response.
                            let listeners = std::mem::take(listeners);
                            match Pin::new(response.body_mut()).poll_frame(cx) {
                                Poll::Ready(first) => {
                                    return Poll::Ready(Ok(with_first_frame(
                                        response, first, listeners,
                                    )));
                                }
                                Poll::Pending => {
                                    kind.set(Kind::FirstFrame {
                                        response: Some(response),
                                        listeners,
                                    });
                                    return Poll::Pending;
                                }
                            }
                        }
                    }
                    let Some(json) = json.take().filter(|json| {
                        json::worth_reading(json, status.as_u16(), response.headers())
                    }) else {
                        return Poll::Ready(Ok(response.map(PeekBody::untouched)));
                    };
                    // The read ends after its own timeout, and never after
                    // the attempt's deadline.
                    let mut until = crate::clock::instant_at(Instant::now(), json.read_timeout)
                        .unwrap_or_else(crate::clock::far_future);
                    if let Some(deadline) = deadline {
                        until = until.min(*deadline);
                    }
                    kind.set(Kind::Reading {
                        read: Box::pin(JsonRead {
                            response: Some(response),
                            held: Held::new(),
                            copy: Vec::new(),
                            json,
                            timer: tokio::time::sleep_until(until),
                        }),
                    });
                }
                KindProj::FirstFrame {
                    response,
                    listeners,
                } => {
                    let body = response
                        .as_mut()
                        .expect("PeekFuture polled after completion")
                        .body_mut();
                    let first = ready!(Pin::new(body).poll_frame(cx));
                    let response = response.take().expect("PeekFuture polled after completion");
                    let listeners = std::mem::take(listeners);
                    return Poll::Ready(Ok(with_first_frame(response, first, listeners)));
                }
                KindProj::Reading { read } => {
                    let JsonReadProj {
                        response,
                        held,
                        copy,
                        json,
                        mut timer,
                    } = read.as_mut().project();
                    let body = response
                        .as_mut()
                        .expect("PeekFuture polled after completion")
                        .body_mut();
                    let step = match Pin::new(body).poll_frame(cx) {
                        Poll::Ready(frame) => take(frame, held, copy, json.max_body),
                        Poll::Pending if timer.as_mut().poll(cx).is_ready() => Step::Done {
                            classify: false,
                            ended: Ended::No,
                        },
                        Poll::Pending => return Poll::Pending,
                    };
                    let Step::Done { classify, ended } = step else {
                        continue;
                    };
                    let (mut head, inner) = response
                        .take()
                        .expect("PeekFuture polled after completion")
                        .into_parts();
                    if classify {
                        let found = read_json(json, copy);
                        if !found.is_empty() {
                            head.extensions.insert(found);
                        }
                    }
                    let held = std::mem::replace(held, Held::new());
                    let body = PeekBody::peeked(inner, held, ended, None);
                    return Poll::Ready(Ok(Response::from_parts(head, body)));
                }
            }
        }
    }
}

/// What the JSON body says, traced.
#[cfg(feature = "quota")]
fn read_json(json: &JsonRules, body: &[u8]) -> BodySignals {
    let found = json::read_body(json, body);
    if let Some(code) = found.quota() {
        tracing::debug!(
            target: "tower_retry_budget",
            code,
            "the response's body says the quota is used up"
        );
    }
    if let Some(retry_delay) = found.retry_delay() {
        tracing::debug!(
            target: "tower_retry_budget",
            retry_delay,
            "the response's body names a delay"
        );
    }
    if let Some(kind) = found.rate_limited() {
        tracing::debug!(
            target: "tower_retry_budget",
            kind,
            "the response's body says it is a rate limit"
        );
    }
    found
}

/// Without the `quota` feature no rule can be set, so no body is read.
#[cfg(not(feature = "quota"))]
fn read_json(_: &JsonRules, _: &[u8]) -> BodySignals {
    BodySignals::new()
}

/// The response with the frame the gRPC peek read put back in front of its
/// body. Trailers and no message: the status is known now, and the head
/// becomes its Trailers-Only form. A message first: a status may still come
/// in the trailers after it, watched for if anyone listens.
fn with_first_frame<B: Body>(
    response: Response<B>,
    first: Option<Result<Frame<B::Data>, B::Error>>,
    listeners: Listeners,
) -> Response<PeekBody<B>> {
    let (mut head, inner) = response.into_parts();
    let mut held = Held::new();
    let mut watch = None;
    let ended = match first {
        None => Ended::Yes,
        Some(Err(error)) => Ended::Failed(error),
        Some(Ok(frame)) => {
            if let Some(trailers) = frame.trailers_ref() {
                grpc::to_trailers_only(&mut head.headers, &mut head.extensions, trailers);
            } else if frame.is_data() {
                watch = listeners.watch(&mut head.extensions);
            }
            held.push(frame);
            Ended::No
        }
    };
    Response::from_parts(head, PeekBody::peeked(inner, held, ended, watch))
}

/// Keeps one frame of a JSON body (given back to the caller as it is) and
/// a copy of its data for the reading.
fn take<D: Buf, E>(
    frame: Option<Result<Frame<D>, E>>,
    held: &mut Held<D>,
    copy: &mut Vec<u8>,
    max_body: usize,
) -> Step<E> {
    match frame {
        None => Step::Done {
            classify: true,
            ended: Ended::Yes,
        },
        Some(Err(error)) => Step::Done {
            classify: false,
            ended: Ended::Failed(error),
        },
        Some(Ok(frame)) => {
            let Some(data) = frame.data_ref() else {
                // Trailers: the data is over.
                held.push(frame);
                return Step::Done {
                    classify: true,
                    ended: Ended::No,
                };
            };
            // A buffer in several pieces (never the case for `Bytes`)
            // is not read: the body is passed on unclassified.
            let contiguous = data.chunk().len() == data.remaining();
            // A body of endless empty frames is not waited for either.
            let fits =
                copy.len().saturating_add(data.remaining()) <= max_body && held.len() < MAX_FRAMES;
            if contiguous && fits {
                copy.extend_from_slice(data.chunk());
            }
            held.push(frame);
            if contiguous && fits {
                Step::More
            } else {
                Step::Done {
                    classify: false,
                    ended: Ended::No,
                }
            }
        }
    }
}
