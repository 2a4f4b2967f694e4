//! The caller's [`CancellationToken`], put in a request's extensions: when
//! it fires, the action stops as the caller leaving (an extra of the
//! retry layer, heard through [`extra`](crate::extra); the request's
//! token is found with what else it carries, in `caller.rs`).

use std::future::Future;
use std::pin::Pin;
use std::task::Context;

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::extra::ActionExtra;

/// The wait for one request's token (boxed: it is pinned while the action
/// polls it).
pub(crate) struct Watched(Pin<Box<WaitForCancellationFutureOwned>>);

impl Watched {
    /// The wait for `token`.
    pub(crate) fn new(token: &CancellationToken) -> Self {
        Self(Box::pin(token.clone().cancelled_owned()))
    }
}

impl ActionExtra for Watched {
    fn cancelled(&mut self, cx: &mut Context<'_>) -> bool {
        self.0.as_mut().poll(cx).is_ready()
    }
}
