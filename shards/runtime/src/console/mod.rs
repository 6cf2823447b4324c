//! The web console: a page served at `/` on the HTTP port (`assets.rs`, files embedded in
//! the binary) and the JSON API it calls (`api.rs` the routes, `caller.rs` who calls and
//! how; `runs.rs` (with `all_runs.rs`, every kind and name at once), `catalog.rs` and
//! `overview.rs` by page, `views.rs` the replies as JSON, `graph.rs` a definition as a
//! graph, `params.rs` and `errors.rs` a request's input and the API's errors). The API
//! reaches the shards in process through `bridge.rs`.

mod all_runs;
mod api;
mod assets;
mod bridge;
mod caller;
mod catalog;
mod errors;
mod graph;
mod overview;
mod params;
mod runs;
mod views;

pub(crate) use api::router;
pub(crate) use bridge::{CONSOLE_CONN, Call, ConsoleCalls, bridge, serve_calls};
pub(crate) use caller::Console;
