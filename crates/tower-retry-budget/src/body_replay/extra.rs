//! The retry layer's part that reads a request's [`ReplayHandle`] (found
//! with what else the request carries, in `caller.rs`): a body that went
//! over its replay limit cannot be sent again in full, and the core
//! decides what that means for each response.

use retry_budget::Answer;

use super::ReplayHandle;
use crate::extra::{amend, ActionExtra};

impl ActionExtra for ReplayHandle {
    /// A body over its limit: not replayable (an answer is replayable
    /// unless told otherwise).
    fn answer(&mut self, answer: &mut Answer<'_>) {
        if !self.is_replayable() {
            amend(answer, |answer| answer.replayable(false));
        }
    }
}
