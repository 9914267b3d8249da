//! The integration tests of `bench`, in one test binary (one link, one process).

mod killed_bench;
mod null_operator;
