//! Below the commit path: the log's records, the state they fold into (`ShardState::apply`,
//! one store per domain) and the index derived from it (`Index::observe`). Nothing here
//! sends, waits or answers: handlers above read this state, plan records against it and
//! commit them (`core::cx::Core::commit`).

mod apply;
pub mod archive;
pub mod archived;
mod archived_wire;
mod branches;
pub mod cursor;
pub mod events;
pub mod index;
pub mod kv;
pub mod plan_steps;
pub mod record;
pub mod registry;
pub mod run_control;
pub mod run_image;
pub mod runs;
pub mod scheduler;
pub mod schedules;
pub mod search;
pub mod snapshot;
pub mod state;
pub mod stream_group_ops;
pub mod stream_groups;
pub mod streams;
pub mod webhooks;
pub mod workflow_defs;
pub mod workflows;
