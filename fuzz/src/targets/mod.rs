//! The fuzz targets. Each reads untrusted bytes the way the server does and must return,
//! whatever the bytes: no panic, no hang, no allocation out of proportion to the input.

mod auth;
mod frame;
mod record;
mod signal;
mod yaml;

pub use record::remove_scratch;
pub use signal::Signal;

/// A fuzz target: what it runs, where its mutations start, and what its inputs look like.
pub struct Target {
    pub name: &'static str,
    /// Runs one input; returns a cheap fingerprint of what happened (which result, which
    /// error), the driver's stand-in for coverage in a build without coverage counters.
    pub run: fn(&[u8]) -> u64,
    /// Valid inputs built with the crates' own encoders, so mutations start deep.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Tokens the mutator inserts (format markers, field names).
    pub dictionary: &'static [&'static [u8]],
    /// Longest input the mutator makes.
    pub len_max: usize,
}

pub const TARGETS: &[&Target] = &[
    &frame::TARGET,
    &record::TARGET,
    &yaml::TARGET,
    &auth::TARGET,
];

pub fn by_name(name: &str) -> Option<&'static Target> {
    TARGETS.iter().copied().find(|t| t.name == name)
}

pub fn names() -> Vec<&'static str> {
    TARGETS.iter().map(|t| t.name).collect()
}
