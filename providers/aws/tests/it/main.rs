//! The crate's integration tests, linked as one test binary: a file under `tests/` is a binary
//! of its own that links every dependency again, which cost CI minutes of linking and gigabytes
//! of disk. Each former binary is a module here, so its tests keep their names under it.

mod clb;
mod common;
mod error_classes;
mod idempotency;
mod nlb;
mod plan_audit;
mod plan_equals_apply;
mod restart;
mod throttle;
