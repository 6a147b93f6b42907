//! The state file follows changes while the server runs, so even an abrupt stop loses at most
//! the last moments.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{crash_and_restart, lb_service, persisting_to};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};

#[tokio::test]
async fn state_file_follows_changes_without_a_clean_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let server = persisting_to(&state).await;
    let api: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    let created = api
        .create(&PostParams::default(), &lb_service("durable", 80))
        .await
        .unwrap();
    let again = crash_and_restart(server, &state).await;
    let api: Api<Service> = Api::namespaced(again.client().unwrap(), "default");
    let restored = api.get("durable").await.unwrap();
    assert_eq!(restored.metadata.uid, created.metadata.uid);
    assert_eq!(
        restored.metadata.resource_version,
        created.metadata.resource_version
    );
    // Only the state file itself is left in the directory (temp files are renamed away).
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(files.len(), 1);
}
