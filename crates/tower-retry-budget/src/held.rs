//! The response held during a wait between attempts, kept small.
//!
//! A `429` that is followed by a retry is held until the next attempt
//! starts: if the action stops before that (the caller's transport never
//! becomes ready, a client budget refuses), it is the answer. Many actions
//! may wait at once (a whole client told to back off), each holding one,
//! so what it keeps matters. Its body cannot be dropped (the caller's body
//! type has no empty value in general), but its header table can be made
//! to fit: `http`'s table grows by powers of two from a first allocation
//! sized for several fields, so a 429 with one or two fields carries room
//! for many more. Rebuilding it at its exact size costs a few hundred
//! instructions on a path that then waits for seconds, and saves most of
//! the table. (`http` has no `shrink_to_fit` for `HeaderMap`; this is the
//! one hand-written step.)

use http::{HeaderMap, Response};

/// `response` with its header table rebuilt at the size of its fields,
/// in the same order, every value kept.
pub(crate) fn compact<B>(mut response: Response<B>) -> Response<B> {
    let headers = response.headers_mut();
    // A table at least half full would be rebuilt at about its size.
    if headers.len().saturating_mul(2) > headers.capacity() {
        return response;
    }
    let mut fitted = HeaderMap::with_capacity(headers.len());
    let mut name = None;
    for (key, value) in std::mem::take(headers) {
        // A field's further values come with `None`: the last name given.
        if let Some(key) = key {
            name = Some(key);
        }
        if let Some(name) = &name {
            fitted.append(name.clone(), value);
        }
    }
    *response.headers_mut() = fitted;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_and_value_is_kept_in_order_in_a_table_that_fits() {
        let response = Response::builder()
            .status(429)
            .header("retry-after", "10")
            .header("x-limit", "a")
            .header("x-limit", "b")
            .header("content-length", "0")
            .body(())
            .unwrap();
        let before = response.headers().clone();
        let held = compact(response);
        assert_eq!(held.status(), 429);
        assert_eq!(held.headers(), &before);
        let limits: Vec<_> = held.headers().get_all("x-limit").iter().collect();
        assert_eq!(limits, ["a", "b"]);
    }

    #[test]
    fn a_table_with_room_for_many_more_fields_is_made_to_fit() {
        let response = Response::builder()
            .status(429)
            .header("retry-after", "10")
            .body(())
            .unwrap();
        let room = response.headers().capacity();
        let held = compact(response);
        assert_eq!(held.headers()["retry-after"], "10");
        assert!(held.headers().capacity() < room, "{room}");
    }

    #[test]
    fn a_response_without_fields_is_unchanged() {
        let held = compact(Response::new("body"));
        assert!(held.headers().is_empty());
        assert_eq!(*held.body(), "body");
    }
}
