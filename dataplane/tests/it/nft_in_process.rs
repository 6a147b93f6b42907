//! The nftables backend's in-process path: with the plain `nft` command, incremental syncs run
//! in a libnftables context kept open across syncs (full syncs still run the `nft` program).
//! The test moves one thread into a network namespace it creates, so the context's netlink
//! socket, and every rule, lands there and never in the namespace the tests run in.

#![allow(unsafe_code)] // setns(2) for the test thread; no safe wrapper among the dependencies

use crate::support;

use std::os::fd::AsRawFd;
use std::process::Command;

use kube_lb_dataplane::model::{Index, IndexConfig, Snapshot};
use kube_lb_dataplane::nft::{Commands, NftBackend, NftConfig, NftError};
use kube_lb_dataplane::testing::{node, service, slice};

const TABLE: &str = "klb-inproc";

fn snapshot(last_endpoint: &str) -> Snapshot {
    snapshot_with(&["10.244.1.1", "10.244.1.2", last_endpoint])
}

fn snapshot_with(endpoints: &[&str]) -> Snapshot {
    let mut index = Index::new(IndexConfig {
        node_name: "n1".into(),
        nodeport_cidrs: Vec::new(),
        allow_loopback_endpoints: false,
    });
    index.apply_node(&node("n1", "za", "r1", &["10.0.0.11"]));
    index.apply_service(
        &service("default", "web", "10.96.0.10")
            .port("", "TCP", 80)
            .build(),
    );
    let mut eps = slice("default", "web", "web-1").port("", "TCP", 8080);
    for endpoint in endpoints {
        eps = eps.endpoint(endpoint, "n1");
    }
    index.apply_endpoint_slice(&eps.build());
    index.snapshot()
}

fn buckets(netns: &str) -> String {
    support::run(&[
        "ip", "netns", "exec", netns, "nft", "list", "map", "ip", TABLE, "buckets",
    ])
}

/// Runs `test` on a thread inside network namespace `netns`, on a runtime of that thread.
fn in_netns(netns: &str, test: impl FnOnce() + Send + 'static) {
    let path = format!("/run/netns/{netns}");
    let thread = std::thread::spawn(move || {
        let target = std::fs::File::open(&path).expect("netns file");
        // SAFETY: `target` is an open namespace file descriptor for the duration of the call;
        // setns only changes this thread's network namespace, and the thread ends with the test.
        let result = unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(result, 0, "setns: {}", std::io::Error::last_os_error());
        test();
    });
    if let Err(panic) = thread.join() {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn incremental_syncs_run_in_a_kept_context_and_recover_from_a_refusal() {
    require_netns!();
    let netns = format!("klb-inproc-{}", std::process::id());
    support::run(&["ip", "netns", "add", &netns]);
    let inside = netns.clone();
    let outcome = std::panic::catch_unwind(move || {
        in_netns(&inside.clone(), move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let mut backend = NftBackend::new(
                    NftConfig {
                        table: TABLE.into(),
                        ..NftConfig::default()
                    },
                    Commands {
                        nft: vec!["nft".into()],
                        conntrack: None,
                        sysctl: Vec::new(),
                    },
                );
                let report = backend.sync(&snapshot("10.244.1.3")).await.expect("full");
                assert!(report.full);
                assert!(buckets(&inside).contains("10.244.1.3 . 8080"));

                let report = backend.sync(&snapshot("10.244.1.4")).await.expect("change");
                assert!(!report.full);
                assert_eq!(report.commands, 2, "one bucket element replaced");
                let listed = buckets(&inside);
                assert!(listed.contains("10.244.1.4 . 8080"), "{listed}");
                assert!(!listed.contains("10.244.1.3 . 8080"), "{listed}");

                // The table vanishes behind the backend's back: the next change is refused as a
                // whole, and the sync after it recreates the table.
                support::run(&[
                    "ip", "netns", "exec", &inside, "nft", "delete", "table", "ip", TABLE,
                ]);
                let refused = backend.sync(&snapshot("10.244.1.5")).await;
                assert!(
                    matches!(refused, Err(NftError::Rejected { .. })),
                    "{refused:?}"
                );
                let report = backend.sync(&snapshot("10.244.1.5")).await.expect("resync");
                assert!(report.full, "a refused sync makes the next one full");
                assert!(buckets(&inside).contains("10.244.1.5 . 8080"));
            });
        });
    });
    let host = Command::new("nft")
        .args(["list", "table", "ip", TABLE])
        .output()
        .map(|output| output.status.success());
    support::run(&["ip", "netns", "del", &netns]);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    assert_eq!(
        host.ok(),
        Some(false),
        "nothing lands in the test's own namespace"
    );
}

/// The maps are declared with a size (the kernel's cap on them): a sync that would outgrow one
/// recreates the table with room for twice the new count, and changes after it are incremental
/// again.
#[test]
fn a_map_outgrowing_its_declared_size_is_recreated_larger() {
    require_netns!();
    let netns = format!("klb-grow-{}", std::process::id());
    support::run(&["ip", "netns", "add", &netns]);
    let inside = netns.clone();
    let outcome = std::panic::catch_unwind(move || {
        in_netns(&inside.clone(), move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let mut backend = NftBackend::new(
                    NftConfig {
                        table: TABLE.into(),
                        ..NftConfig::default()
                    },
                    Commands {
                        nft: vec!["nft".into()],
                        conntrack: None,
                        sysctl: Vec::new(),
                    },
                );
                let report = backend.sync(&snapshot("10.244.1.3")).await.expect("full");
                assert!(report.full);
                assert!(
                    buckets(&inside).contains("size 1024"),
                    "{}",
                    buckets(&inside)
                );

                let many: Vec<String> = (0..1100)
                    .map(|i| format!("10.244.{}.{}", 10 + i / 250, 1 + i % 250))
                    .collect();
                let many: Vec<&str> = many.iter().map(String::as_str).collect();
                let report = backend.sync(&snapshot_with(&many)).await.expect("grown");
                assert!(report.full, "1,100 buckets do not fit a map of 1,024");
                let listed = buckets(&inside);
                assert!(listed.contains("size 4096"), "{listed}");
                assert_eq!(listed.matches(" . 8080").count(), 1100);

                let mut moved = many.clone();
                moved[1099] = "10.245.0.1";
                let report = backend.sync(&snapshot_with(&moved)).await.expect("change");
                assert!(!report.full, "within the new size");
                assert_eq!(report.commands, 2, "one bucket element replaced");
                let listed = buckets(&inside);
                assert!(listed.contains("10.245.0.1 . 8080"), "{listed}");

                // A group size no pick chain exists for: nft 1.0.6 cannot bind the map in a
                // rule of an incremental transaction, so the table is recreated.
                moved.pop();
                let report = backend.sync(&snapshot_with(&moved)).await.expect("smaller");
                assert!(report.full, "a new pick chain recreates the table");
                assert_eq!(buckets(&inside).matches(" . 8080").count(), 1099);
            });
        });
    });
    support::run(&["ip", "netns", "del", &netns]);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
