//! The caller's [`CancellationToken`], put in a request's extensions: when
//! it fires, the action stops as the caller leaving (an extra of the
//! retry layer, heard through [`extra`](crate::extra)).

use std::future::Future;
use std::pin::Pin;
use std::task::Context;

use http::Extensions;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

#[cfg(test)]
use crate::extra::Extra;
use crate::extra::{ActionExtra, Moments, RequestExtra};

/// Looks for a [`CancellationToken`] in each request.
pub(crate) struct Cancellation;

impl RequestExtra for Cancellation {
    fn find(&self, extensions: &Extensions) -> Option<Box<dyn ActionExtra>> {
        let token = extensions.get::<CancellationToken>()?.clone();
        Some(Box::new(Watched(Box::pin(token.cancelled_owned()))))
    }
}

/// The wait for one request's token (boxed: it is pinned while the action
/// polls it).
struct Watched(Pin<Box<WaitForCancellationFutureOwned>>);

impl ActionExtra for Watched {
    fn moments(&self) -> Moments {
        Moments::CANCELLED
    }

    fn cancelled(&mut self, cx: &mut Context<'_>) -> bool {
        self.0.as_mut().poll(cx).is_ready()
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use super::*;

    #[test]
    fn only_a_request_with_a_token_is_watched_and_it_fires_once_cancelled() {
        let (mut plain, ()) = http::Request::new(()).into_parts();
        assert!(Cancellation.start(Some(&mut plain)).is_none());
        assert!(Cancellation.start(None).is_none());

        let token = CancellationToken::new();
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.extensions.insert(token.clone());
        let mut watched = Cancellation.start(Some(&mut parts)).unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        assert!(!watched.cancelled(&mut cx));
        token.cancel();
        assert!(watched.cancelled(&mut cx));
    }
}
