//! What the `flo-loadtest` and `flo-chaos` binaries share: running a flo server of their own.

pub mod spawn;
