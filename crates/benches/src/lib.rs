//! Benchmarks and measurement programs for the retry budget; see
//! `BENCHMARKS.md` at the top of the repository. Nothing to use here.
#![forbid(unsafe_code)]
