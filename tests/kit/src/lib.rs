//! flo's test fixtures, one copy each: a seeded RNG ([`rng`]), the WAT guests the tests and
//! harnesses register ([`guests`]) and a `flo server` run as a child process ([`server`]).
//!
//! The crate depends on no flo crate: the engine's tests, the load tester and the fuzzer
//! use it without pulling in the server.

pub mod guests;
pub mod rng;
pub mod server;

pub use rng::Rng;
