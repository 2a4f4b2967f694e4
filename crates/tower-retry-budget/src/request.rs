//! Which requests may be retried, and how a retry copy is made.
//!
//! Only safe methods (GET, HEAD, OPTIONS, TRACE; RFC 9110 §9.2.1) are
//! retried. A write is retried only when the caller opts in for that one
//! request with the [`Idempotent`] extension, asserting that repeating it is
//! the same logical operation (for example because it carries an
//! `Idempotency-Key` header, which every copy keeps unchanged). A request
//! marked [`BudgetThis`] is budgeted too (a deadline, cancellation, a
//! report), retried only as the policy allows. Everything else passes
//! through untouched: no copy, no timer.

use http::Request;

/// Request extension: the caller asserts that this request may be repeated
/// although its method is not safe (an `Idempotency-Key` that every retry
/// keeps, a gRPC method whose `idempotency_level` is `IDEMPOTENT`).
///
/// ```
/// use tower_retry_budget::Idempotent;
///
/// let mut request = http::Request::post("http://example.com/jobs")
///     .header("idempotency-key", "job-7f3a")
///     .body(())
///     .unwrap();
/// request.extensions_mut().insert(Idempotent);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Idempotent;

/// Request extension: the caller asks the layer to budget this request
/// although it may not be retried by its method alone (a write): it then
/// gets a deadline, cancellation and a report like any budgeted request.
/// Unlike [`Idempotent`], it asserts nothing about repeating the request:
/// one that [`may_retry`] refuses is sent once, no copy of it is kept, and
/// a status the policy would retry ends it `not_retryable` with the reason
/// in its report (`Action::not_repeatable`); a layer that keeps a body for
/// replay ([`ReplayBodyLayer`](crate::body_replay::ReplayBodyLayer)) keeps
/// none for it.
///
/// ```
/// use tower_retry_budget::{is_budgeted, may_retry, BudgetThis};
///
/// let mut request = http::Request::post("http://example.com/jobs").body(()).unwrap();
/// request.extensions_mut().insert(BudgetThis);
/// assert!(is_budgeted(&request) && !may_retry(&request));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetThis;

/// Whether a request may ever be retried: a safe method, or marked
/// [`Idempotent`].
#[inline]
pub fn may_retry<B>(request: &Request<B>) -> bool {
    // `is_safe`: GET, HEAD, OPTIONS, TRACE (one match on the method's tag).
    request.method().is_safe() || request.extensions().get::<Idempotent>().is_some()
}

/// Whether the retry layer budgets a request: one that [`may_retry`], or
/// one marked [`BudgetThis`]. Any other passes straight through.
#[inline(always)]
pub fn is_budgeted<B>(request: &Request<B>) -> bool {
    may_retry(request) || request.extensions().get::<BudgetThis>().is_some()
}

/// A copy of a request for a retry: method, URI, version, headers,
/// extensions and body, unchanged (`http`'s own `Clone`: each part cloned
/// once, nothing built to be replaced).
#[inline]
pub(crate) fn copy<B: Clone>(request: &Request<B>) -> Request<B> {
    request.clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn safe_methods_only_unless_opted_in() {
        for m in [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE] {
            assert!(may_retry(&Request::builder().method(m).body(()).unwrap()));
        }
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            let mut r = Request::builder().method(m).body(()).unwrap();
            assert!(!may_retry(&r));
            r.extensions_mut().insert(Idempotent);
            assert!(may_retry(&r));
        }
    }

    #[test]
    fn a_write_marked_budget_this_is_budgeted_not_made_repeatable() {
        let mut r = Request::builder().method(Method::POST).body(()).unwrap();
        assert!(!is_budgeted(&r));
        r.extensions_mut().insert(BudgetThis);
        assert!(is_budgeted(&r) && !may_retry(&r));
        let get = Request::builder().method(Method::GET).body(()).unwrap();
        assert!(is_budgeted(&get));
    }

    #[test]
    fn copy_keeps_everything() {
        let mut r = Request::builder()
            .method(Method::GET)
            .uri("http://a/b?c")
            .header("idempotency-key", "k1")
            .body("body")
            .unwrap();
        r.extensions_mut().insert(7u32);
        let c = copy(&r);
        assert_eq!(c.method(), r.method());
        assert_eq!(c.uri(), r.uri());
        assert_eq!(c.headers(), r.headers());
        assert_eq!(c.extensions().get::<u32>(), Some(&7));
        assert_eq!(*c.body(), "body");
    }
}
