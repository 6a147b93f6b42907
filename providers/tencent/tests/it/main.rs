//! The crate's integration tests, linked as one test binary: a file under `tests/` is a binary
//! of its own that links every dependency again, which cost CI minutes of linking and gigabytes
//! of disk. Each former binary is a module here, so its tests keep their names under it.

mod against_mock;
mod error_shapes;
mod plan_equals_apply;
mod source_ranges;
mod support;
mod tencentcloud_sdk;
