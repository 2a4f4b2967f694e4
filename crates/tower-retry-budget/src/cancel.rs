//! The caller's [`CancellationToken`], put in a request's extensions: when
//! it fires, the action stops as the caller leaving (an extra of the
//! retry layer, heard through [`extra`](crate::extra)).

use std::future::Future;
use std::pin::Pin;
use std::task::Context;

use http::request::Parts;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::extra::{ActionExtra, Extra};

/// Looks for a [`CancellationToken`] in each request.
pub(crate) struct Cancellation;

impl Extra for Cancellation {
    fn start(&self, request: Option<&mut Parts>) -> Option<Box<dyn ActionExtra>> {
        let token = request?.extensions.get::<CancellationToken>()?.clone();
        Some(Box::new(Watched(Box::pin(token.cancelled_owned()))))
    }
}

/// The wait for one request's token (boxed: it is pinned while the action
/// polls it).
struct Watched(Pin<Box<WaitForCancellationFutureOwned>>);

impl ActionExtra for Watched {
    fn cancelled(&mut self, cx: &mut Context<'_>) -> bool {
        self.0.as_mut().poll(cx).is_ready()
    }
}
