//! Classic ELB.

pub mod io;
pub mod plan;
