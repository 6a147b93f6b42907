//! `kube-lb`: Kubernetes Service load-balancer controller and node dataplane.
//!
//! The binary (`main.rs`) only parses the command line; everything else lives here so the
//! integration tests can drive the controller and the cloud selection directly.

pub mod audit;
pub mod cli;
pub mod cloud;
pub mod controller;
pub mod demo;
pub mod health;
pub mod leader;
pub mod manifests;
pub mod metrics;
pub mod webhook;
