//! The crate's integration tests, linked as one test binary: a file under `tests/` is a binary
//! of its own that links every dependency again, which cost CI minutes of linking and gigabytes
//! of disk. Each former binary is a module here, so its tests keep their names under it.

mod common;
mod concurrency;
mod crd;
mod events;
mod faults;
mod field_validation;
mod fuzz;
mod garbage_collection;
mod kube_crud;
mod kubectl;
mod kubectl_protobuf;
mod kubectl_tables;
mod namespaces;
mod openapi_v2;
mod persistence;
mod python_client;
mod request_options;
mod watch;
mod webhooks;
