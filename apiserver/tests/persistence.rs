//! The state file follows changes while the server runs, so even an abrupt stop loses at most
//! the last moments.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

mod common;

use common::{lb_service, state_file_reaches};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use kube_lb_apiserver::ApiServer;

#[tokio::test]
async fn state_file_follows_changes_without_a_clean_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let server = ApiServer::builder()
        .state_file(&state)
        .start()
        .await
        .unwrap();
    let api: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    let created = api
        .create(&PostParams::default(), &lb_service("durable", 80))
        .await
        .unwrap();
    let version = server.store().current_version();
    state_file_reaches(&state, version).await;
    // Dropped, not shut down: no final write.
    drop(server);

    let again = ApiServer::builder()
        .state_file(&state)
        .start()
        .await
        .unwrap();
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
