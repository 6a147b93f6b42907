//! Network Load Balancer.

pub mod io;
pub mod plan;
