//! What the retry layer tells the layers below it about each attempt.
//!
//! # Why
//!
//! A layer below the retry layer (a proxy writing `grpc-timeout`, a client
//! setting its own timeout) needs the attempt's deadline, and must not work
//! it out again from clocks of its own: the core decides when each attempt
//! must answer ([`Decision::AwaitResponse`](retry_budget::Decision)). So
//! the retry layer can put that decision, as an [`AttemptDeadline`], in the
//! extensions of every attempt request it sends.
//!
//! It does so only when asked
//! ([`RetryBudgetLayer::attempt_deadlines`](crate::RetryBudgetLayer::attempt_deadlines)):
//! the first extension of a request allocates its extension map, which
//! costs more than the rest of a first attempt that answers at once, and
//! most stacks have nothing below the retry layer that reads it.
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use http::{Request, Response};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_retry_budget::{AttemptDeadline, Policy, RetryBudgetLayer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let policy = Policy::default().within(Duration::from_secs(2)).unwrap();
//! let service = ServiceBuilder::new()
//!     .layer(RetryBudgetLayer::new(policy).attempt_deadlines())
//!     .service(service_fn(|request: Request<()>| async move {
//!         let deadline = request.extensions().get::<AttemptDeadline>().copied();
//!         assert_eq!(
//!             deadline,
//!             Some(AttemptDeadline { attempt: 1, reservation: Duration::from_secs(2) })
//!         );
//!         Ok::<_, Infallible>(Response::new(()))
//!     }));
//! service.oneshot(Request::new(())).await.unwrap();
//! # }
//! ```

use std::time::Duration;

use http::request::Parts;
use http::Extensions;
use retry_budget::Action;

use crate::clock::Clock;
use crate::extra::{ActionExtra, Extra, Moments};

/// Request extension on every attempt the retry layer sends, when
/// [asked for](crate::RetryBudgetLayer::attempt_deadlines): the attempt's
/// number and the time the core reserved for it (from its start to its
/// deadline). The reservation always ends inside the action's budget, so a
/// caller's deadline that shrank the budget is respected by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptDeadline {
    /// 1-based attempt number.
    pub attempt: u32,
    /// How long the attempt may take: its deadline minus its start.
    pub reservation: Duration,
}

/// The retry layer's extra that puts on every attempt the deadline of the
/// attempt the action has in flight (asked for by
/// [`RetryBudgetLayer::attempt_deadlines`](crate::RetryBudgetLayer::attempt_deadlines)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttemptDeadlines;

impl Extra for AttemptDeadlines {
    /// Zero-sized: itself.
    type Part = Self;

    fn start(&self, request: Option<&mut Parts>) -> Option<Self> {
        request.map(|_| Self)
    }
}

impl ActionExtra for AttemptDeadlines {
    const MOMENTS: Moments = Moments::ATTEMPT;

    fn attempt(&mut self, extensions: &mut Extensions, action: &Action, _clock: &mut Clock) {
        if let Some((attempt, reservation)) = action.reservation() {
            extensions.insert(AttemptDeadline {
                attempt,
                reservation,
            });
        }
    }
}
