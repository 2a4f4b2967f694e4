//! [`QuotaFuture`]: the head, then (for a retried status with a JSON body)
//! the body, up to a bound, under a deadline.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Buf;
use http::Response;
use http_body::{Body, Frame};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::layer::{read_body, worth_reading, QuotaConfig};
use super::{BodyRetryDelay, QuotaBody, QuotaExhausted, RateLimited};

pin_project! {
    /// The response future of [`Quota`](super::Quota).
    pub struct QuotaFuture<F, B>
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
        /// A request the retry layer does not budget: no look at the response.
        Passthrough {
            #[pin]
            future: F,
        },
        /// Waiting for the head.
        Head {
            #[pin]
            future: F,
            config: Arc<QuotaConfig>,
            deadline: Option<Instant>,
        },
        /// Reading the body: what was read, and the bound in time.
        Reading {
            response: Option<Response<B>>,
            held: VecDeque<Frame<B::Data>>,
            copy: Vec<u8>,
            config: Arc<QuotaConfig>,
            #[pin]
            timer: Sleep,
        },
    }
}

impl<F, B: Body> QuotaFuture<F, B> {
    pub(super) const fn passthrough(future: F) -> Self {
        Self {
            kind: Kind::Passthrough { future },
        }
    }

    pub(super) const fn reading(
        future: F,
        config: Arc<QuotaConfig>,
        deadline: Option<Instant>,
    ) -> Self {
        Self {
            kind: Kind::Head {
                future,
                config,
                deadline,
            },
        }
    }
}

/// The most frames the read holds: a body that sends more (of at most
/// `max_body` bytes in all) is passed on unclassified.
const MAX_FRAMES: usize = 1024;

/// What one poll of the body came to.
enum Step<E> {
    /// Keep reading.
    More,
    /// Stop reading, and classify what was read if `true`.
    Done {
        classify: bool,
        ended: Option<Option<E>>,
    },
}

impl<F, B, E> Future for QuotaFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body + Unpin,
{
    type Output = Result<Response<QuotaBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut kind = self.project().kind;
        loop {
            match kind.as_mut().project() {
                KindProj::Passthrough { future } => {
                    let response = ready!(future.poll(cx))?;
                    return Poll::Ready(Ok(response.map(QuotaBody::untouched)));
                }
                KindProj::Head {
                    future,
                    config,
                    deadline,
                } => {
                    let response = ready!(future.poll(cx))?;
                    if !worth_reading(config, response.status().as_u16(), response.headers()) {
                        return Poll::Ready(Ok(response.map(QuotaBody::untouched)));
                    }
                    // The read ends after its own timeout, and never after
                    // the attempt's deadline.
                    let mut until = crate::clock::instant_at(Instant::now(), config.read_timeout)
                        .unwrap_or_else(crate::clock::far_future);
                    if let Some(deadline) = deadline {
                        until = until.min(*deadline);
                    }
                    let config = config.clone();
                    kind.set(Kind::Reading {
                        response: Some(response),
                        held: VecDeque::new(),
                        copy: Vec::new(),
                        config,
                        timer: tokio::time::sleep_until(until),
                    });
                }
                KindProj::Reading {
                    response,
                    held,
                    copy,
                    config,
                    mut timer,
                } => {
                    let body = response
                        .as_mut()
                        .expect("QuotaFuture polled after completion")
                        .body_mut();
                    let step = match Pin::new(body).poll_frame(cx) {
                        Poll::Ready(frame) => take(frame, held, copy, config.max_body),
                        Poll::Pending if timer.as_mut().poll(cx).is_ready() => Step::Done {
                            classify: false,
                            ended: None,
                        },
                        Poll::Pending => return Poll::Pending,
                    };
                    let Step::Done { classify, ended } = step else {
                        continue;
                    };
                    let (mut head, inner) = response
                        .take()
                        .expect("QuotaFuture polled after completion")
                        .into_parts();
                    if classify {
                        let says = read_body(config, copy);
                        if let Some(code) = says.quota {
                            tracing::debug!(
                                target: "tower_retry_budget",
                                code = &*code,
                                "the response's body says the quota is used up"
                            );
                            head.extensions.insert(QuotaExhausted::new(code));
                        }
                        if let Some(raw) = says.retry_delay {
                            tracing::debug!(
                                target: "tower_retry_budget",
                                retry_delay = &*raw,
                                "the response's body names a delay"
                            );
                            head.extensions.insert(BodyRetryDelay::new(raw));
                        }
                        if let Some(kind) = says.rate_limited {
                            tracing::debug!(
                                target: "tower_retry_budget",
                                kind = &*kind,
                                "the response's body says it is a rate limit"
                            );
                            head.extensions.insert(RateLimited::new(kind));
                        }
                    }
                    let held = std::mem::take(held);
                    let body = QuotaBody::read(inner, held, ended);
                    return Poll::Ready(Ok(Response::from_parts(head, body)));
                }
            }
        }
    }
}

/// Keeps one frame of the body (given back to the caller as it is) and a
/// copy of its data for the JSON reading.
fn take<D: Buf, E>(
    frame: Option<Result<Frame<D>, E>>,
    held: &mut VecDeque<Frame<D>>,
    copy: &mut Vec<u8>,
    max_body: usize,
) -> Step<E> {
    match frame {
        None => Step::Done {
            classify: true,
            ended: Some(None),
        },
        Some(Err(error)) => Step::Done {
            classify: false,
            ended: Some(Some(error)),
        },
        Some(Ok(frame)) => {
            let Some(data) = frame.data_ref() else {
                // Trailers: the data is over.
                held.push_back(frame);
                return Step::Done {
                    classify: true,
                    ended: None,
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
            held.push_back(frame);
            if contiguous && fits {
                Step::More
            } else {
                Step::Done {
                    classify: false,
                    ended: None,
                }
            }
        }
    }
}
