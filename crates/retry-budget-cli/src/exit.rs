//! The exit statuses of `retry-budget`, in one place.
//!
//! A script reading the status learns how the action ended without parsing
//! stderr. The body codes are curl's (`CURLE_PARTIAL_FILE`,
//! `CURLE_WRITE_ERROR`, `CURLE_OPERATION_TIMEDOUT`), and a signal is
//! `128 + its number`, as a shell reports it:
//!
//! | status | meaning |
//! |---|---|
//! | 0 | the action ended as `success` and its body was read to the end |
//! | 1 | any other outcome (`budget_exhausted`, `not_retryable`, ...) |
//! | 2 | usage error: one line on stderr, nothing sent |
//! | 18 | the body was cut short by the server or the connection |
//! | 23 | the output (stdout or `--output`) could not be written: reading stopped at once; or stdout refused the `--json` report |
//! | 28 | the body was not read to the end within the budget |
//! | 129 / 130 / 143 | SIGHUP / SIGINT (Ctrl-C) / SIGTERM: the user left; the report is printed first |
//!
//! When several apply, the first in this order wins: the user leaving, the
//! output failing, the body's deadline, the body cut short, then the
//! outcome.

use std::process::ExitCode;

use crate::body::BodyEnd;
use crate::interrupt::Leave;

/// One exit status (see the module docs for the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: `success`, body complete.
    Success,
    /// 1: any other outcome.
    Failure,
    /// 2: a usage error; nothing was sent.
    Usage,
    /// 18: the body was cut short by the server or the connection.
    BodyCutShort,
    /// 23: the output could not be written.
    WriteFailed,
    /// 28: the body was not read to the end within the budget.
    BodyTimedOut,
    /// 129: SIGHUP.
    Hangup,
    /// 130: SIGINT (Ctrl-C).
    Interrupt,
    /// 143: SIGTERM.
    Terminate,
}

impl Exit {
    /// The numeric status.
    pub const fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Failure => 1,
            Self::Usage => 2,
            Self::BodyCutShort => 18,
            Self::WriteFailed => 23,
            Self::BodyTimedOut => 28,
            Self::Hangup => 129,
            Self::Interrupt => 130,
            Self::Terminate => 143,
        }
    }
}

/// What decides the exit status of an action that was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    /// The signal the user left with, if any.
    pub left: Option<Leave>,
    /// Whether stdout refused the `--json` report.
    pub report_unwritten: bool,
    /// How the final body's reading ended.
    pub body: BodyEnd,
    /// Whether the action's outcome is `success`.
    pub success: bool,
}

impl Exit {
    /// The status of an ending, the first that applies of: the user
    /// leaving, the output failing, the body's deadline, the body cut
    /// short, the outcome. A body abandoned without a signal (a scripted
    /// leave) is not a success.
    pub fn of(ending: Ending) -> Self {
        if let Some(leave) = ending.left {
            return leave.exit();
        }
        if ending.report_unwritten {
            return Self::WriteFailed;
        }
        match ending.body.exit() {
            Some(exit) => exit,
            None if ending.success && ending.body != BodyEnd::Cancelled => Self::Success,
            None => Self::Failure,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        Self::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_that_applies_wins() {
        let ok = Ending {
            left: None,
            report_unwritten: false,
            body: BodyEnd::Complete,
            success: true,
        };
        assert_eq!(Exit::of(ok), Exit::Success);
        assert_eq!(
            Exit::of(Ending {
                body: BodyEnd::NotRead,
                ..ok
            }),
            Exit::Success
        );
        assert_eq!(
            Exit::of(Ending {
                success: false,
                ..ok
            }),
            Exit::Failure
        );
        assert_eq!(
            Exit::of(Ending {
                body: BodyEnd::Cancelled,
                ..ok
            }),
            Exit::Failure
        );
        let cut = Ending {
            body: BodyEnd::Truncated,
            success: false,
            ..ok
        };
        assert_eq!(Exit::of(cut).code(), 18);
        assert_eq!(
            Exit::of(Ending {
                body: BodyEnd::TimedOut,
                ..cut
            })
            .code(),
            28
        );
        assert_eq!(
            Exit::of(Ending {
                body: BodyEnd::WriteFailed,
                ..cut
            })
            .code(),
            23
        );
        assert_eq!(
            Exit::of(Ending {
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
            let left = Ending {
                left: Some(leave),
                report_unwritten: true,
                ..cut
            };
            assert_eq!(Exit::of(left).code(), code);
        }
    }
}
