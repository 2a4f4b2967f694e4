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
//! outcome (`get`'s [`Finish`](crate::get::finish::Finish) decides).

use std::process::ExitCode;

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

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        Self::from(exit.code())
    }
}
