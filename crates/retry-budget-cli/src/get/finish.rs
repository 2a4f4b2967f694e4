//! How a `get` ended, as its exit status: the first that applies of the
//! user leaving, the output failing, the body's deadline, the body cut
//! short, the outcome (the table is [`crate::common::exit`]'s).

use crate::common::exit::Exit;
use crate::common::leave::Leave;

use super::final_body::BodyEnd;

/// What decides the exit status of an action that was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finish {
    /// The signal the user left with, if any.
    pub left: Option<Leave>,
    /// Whether stdout refused the `--json` report.
    pub report_unwritten: bool,
    /// How the final body's reading ended.
    pub body: BodyEnd,
    /// Whether the action's outcome is `success`.
    pub success: bool,
}

impl Finish {
    /// The status of an ending, the first that applies of: the user
    /// leaving, the output failing, the body's deadline, the body cut
    /// short, the outcome. A body abandoned without a signal (a scripted
    /// leave) is not a success.
    pub fn exit(self) -> Exit {
        if let Some(leave) = self.left {
            return leave.exit();
        }
        if self.report_unwritten {
            return Exit::WriteFailed;
        }
        match self.body.exit() {
            Some(exit) => exit,
            None if self.success && self.body != BodyEnd::Cancelled => Exit::Success,
            None => Exit::Failure,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit_of(finish: Finish) -> Exit {
        finish.exit()
    }

    #[test]
    fn the_first_that_applies_wins() {
        let ok = Finish {
            left: None,
            report_unwritten: false,
            body: BodyEnd::Complete,
            success: true,
        };
        assert_eq!(exit_of(ok), Exit::Success);
        assert_eq!(
            exit_of(Finish {
                body: BodyEnd::NotRead,
                ..ok
            }),
            Exit::Success
        );
        assert_eq!(
            exit_of(Finish {
                success: false,
                ..ok
            }),
            Exit::Failure
        );
        assert_eq!(
            exit_of(Finish {
                body: BodyEnd::Cancelled,
                ..ok
            }),
            Exit::Failure
        );
        let cut = Finish {
            body: BodyEnd::Truncated,
            success: false,
            ..ok
        };
        assert_eq!(exit_of(cut).code(), 18);
        assert_eq!(
            exit_of(Finish {
                body: BodyEnd::TimedOut,
                ..cut
            })
            .code(),
            28
        );
        assert_eq!(
            exit_of(Finish {
                body: BodyEnd::WriteFailed,
                ..cut
            })
            .code(),
            23
        );
        assert_eq!(
            exit_of(Finish {
                report_unwritten: true,
                ..cut
            })
            .code(),
            23
        );
        for (leave, code) in [
            (Leave::Interrupt, 130),
            (Leave::Terminate, 143),
            (Leave::Hangup, 129),
        ] {
            let left = Finish {
                left: Some(leave),
                report_unwritten: true,
                ..cut
            };
            assert_eq!(exit_of(left).code(), code);
        }
    }
}
