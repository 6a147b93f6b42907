//! Bearer tokens stay out of the logs even at trace level: azure_core 0.21 logs whole requests
//! and its header Debug shows `Authorization` (see `pipeline.rs`).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use kube_lb_provider_core::LoadBalancerProvider;
use support::*;

const UID_A: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";

/// Collects everything the subscriber writes.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_bearer_token_never_reaches_the_logs() {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // Global, and alone in this test binary: a thread-scoped subscriber can miss events whose
    // callsites other tests' threads registered first.
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let h = harness().await;
    h.provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();
    h.provider
        .delete(&svc("web", UID_A).spec().service)
        .await
        .unwrap();

    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    // azure_core logged the requests (headers included) at debug level...
    assert!(
        logs.contains("the following request will be passed to the transport policy"),
        "azure_core's request logging did not run; the test proves nothing"
    );
    assert!(logs.contains("[withheld]"));
    // ...but never with the token the mock issued.
    assert!(!logs.contains("mock-token-"), "a bearer token was logged");
}
