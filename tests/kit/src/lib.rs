//! flo's test fixtures, one copy each: a seeded RNG ([`rng`]), the WAT guests the tests and
//! harnesses register ([`guests`]), a `flo server` run as a child process ([`server`]) and
//! a plain HTTP GET for its HTTP port ([`http`]).
//!
//! The crate depends on no flo crate: the engine's tests, the load tester and the fuzzer
//! use it without pulling in the server.

pub mod guests;
pub mod http;
pub mod rng;
pub mod server;

pub use rng::Rng;
