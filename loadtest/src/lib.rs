//! What the `flo-loadtest` and `flo-chaos` binaries share: where the `flo` binary is, and
//! `--spawn`'s server of their own.

pub mod spawn;
