//! What the engine is made of below the domains: the inputs and effects it exchanges with
//! the runtime (`io`) and the commit path every domain changes state through (`cx`).

pub mod cx;
pub mod io;
