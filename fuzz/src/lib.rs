//! Fuzzing flo's decoders of untrusted bytes on the stable toolchain: the targets (each a
//! `fn(&[u8])` that must never panic), the mutation engine and the campaign driver. See
//! `docs/fuzz.md`.

pub mod campaign;
pub mod coverage;
pub mod guard;
pub mod mutate;
pub mod targets;
