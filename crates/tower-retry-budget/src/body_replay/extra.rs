//! The retry layer's extra that reads a request's [`ReplayHandle`]: a body
//! that went over its replay limit cannot be sent again in full, and the
//! core decides what that means for each response.

use http::Extensions;
use retry_budget::Answer;

use super::ReplayHandle;
use crate::extra::{amend, ActionExtra, Moments, RequestExtra};

/// Looks for a [`ReplayHandle`] in each request.
pub(crate) struct ReplayExtra;

impl RequestExtra for ReplayExtra {
    fn find(&self, extensions: &Extensions) -> Option<Box<dyn ActionExtra>> {
        let handle = extensions.get::<ReplayHandle>()?.clone();
        Some(Box::new(handle))
    }
}

impl ActionExtra for ReplayHandle {
    fn moments(&self) -> Moments {
        Moments::ANSWER
    }

    /// A body over its limit: not replayable (an answer is replayable
    /// unless told otherwise).
    fn answer(&mut self, answer: &mut Answer<'_>) {
        if !self.is_replayable() {
            amend(answer, |answer| answer.replayable(false));
        }
    }
}
