//! The added-latency knob benchmarks use: every request waits the set time before it is
//! answered, and zero switches it off again.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use kube_lb_mock_gce::MockGce;

#[tokio::test]
async fn every_request_waits_the_added_latency() {
    let gce = MockGce::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let url = format!("{}/compute/v1/projects/mock-project/zones", gce.url());
    let timed = || async {
        let start = Instant::now();
        let status = http.get(&url).send().await.unwrap().status();
        assert!(status.is_success(), "{status}");
        start.elapsed()
    };
    gce.set_latency(Duration::from_millis(150));
    for _ in 0..2 {
        let took = timed().await;
        assert!(took >= Duration::from_millis(150), "{took:?}");
    }
    gce.set_latency(Duration::ZERO);
    let mark = gce.journal_len();
    timed().await;
    assert_eq!(
        gce.journal_len(),
        mark + 1,
        "the request was served, not dropped"
    );
}
