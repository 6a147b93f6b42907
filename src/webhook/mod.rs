//! `kube-lb webhook`: lint at admission. A validating admission webhook (AdmissionReview v1)
//! that judges every created or updated LoadBalancer Service as `kube-lb lint` does and answers
//! with each finding as an admission warning (kubectl prints `Warning: <field>: <why>`), or,
//! with `--deny`, refuses a Service with errors.
//!
//! [`review`] is the pure part (an AdmissionReview in, the answer out); [`tls`] loads or makes
//! the serving certificate; [`server`] is the HTTPS shell.

pub mod review;
pub mod server;
pub mod tls;
