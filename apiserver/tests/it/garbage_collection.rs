//! Owner references, as kube-controller-manager's garbage collector honours them: dependents
//! of a deleted owner go with it (background, the default), keep living without it (orphan), or
//! hold it until they are gone (foreground); a dependent with another owner left only loses the
//! reference to the gone one.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube_lb_apiserver::ApiServer;
use serde_json::json;

use crate::common;

const WAIT: Duration = Duration::from_secs(5);

async fn make(api: &Api<ConfigMap>, name: &str, owners: &[&ConfigMap], block: bool) -> ConfigMap {
    let references: Vec<_> = owners
        .iter()
        .map(|owner| {
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "name": owner.metadata.name, "uid": owner.metadata.uid,
                "blockOwnerDeletion": block,
            })
        })
        .collect();
    let mut object = json!({"metadata": {"name": name}, "data": {"k": "v"}});
    if !references.is_empty() {
        object["metadata"]["ownerReferences"] = json!(references);
    }
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .unwrap()
}

async fn gone(api: &Api<ConfigMap>, object: &ConfigMap) {
    let name = object.metadata.name.clone().unwrap();
    let uid = object.metadata.uid.clone().unwrap();
    tokio::time::timeout(
        WAIT,
        await_condition(api.clone(), &name, conditions::is_deleted(&uid)),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} was not deleted"))
    .unwrap();
}

fn owner_uids(object: &ConfigMap) -> Vec<String> {
    object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|r| r.uid.clone())
        .collect()
}

#[tokio::test]
async fn dependents_follow_their_owners_deletion_policy() {
    let server = ApiServer::builder().start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(server.client().unwrap(), "default");

    // Background (kubectl's and client-go's default): the owner goes, then its dependents.
    let owner = make(&api, "owner", &[], false).await;
    let child = make(&api, "child", &[&owner], false).await;
    let grandchild = make(&api, "grandchild", &[&child], false).await;
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    gone(&api, &child).await;
    gone(&api, &grandchild).await;

    // No policy at all deletes dependents too; one with a second owner only loses a reference.
    let first = make(&api, "first", &[], false).await;
    let second = make(&api, "second", &[], false).await;
    let shared = make(&api, "shared", &[&first, &second], false).await;
    let only = make(&api, "only", &[&first], false).await;
    api.delete("first", &DeleteParams::default()).await.unwrap();
    gone(&api, &only).await;
    let shared_uid = shared.metadata.uid.clone().unwrap();
    let kept = common::eventually(WAIT, "the reference to the gone owner dropped", || async {
        let now = api.get("shared").await.unwrap();
        (owner_uids(&now).len() == 1).then_some(now)
    })
    .await;
    assert_eq!(kept.metadata.uid.as_deref(), Some(shared_uid.as_str()));
    assert_eq!(
        owner_uids(&kept),
        vec![second.metadata.uid.clone().unwrap()]
    );

    // Orphan: the owner goes, its dependents stay without the reference.
    let parent = make(&api, "parent", &[], false).await;
    let orphan = make(&api, "orphan", &[&parent], true).await;
    api.delete("parent", &DeleteParams::orphan()).await.unwrap();
    gone(&api, &parent).await;
    let left = api.get("orphan").await.unwrap();
    assert_eq!(left.metadata.uid, orphan.metadata.uid);
    assert!(owner_uids(&left).is_empty(), "{left:?}");

    // A dependent whose owner never existed is collected.
    let phantom = ConfigMap {
        metadata: serde_json::from_value(json!({"name": "ghost", "uid": "no-such-uid"})).unwrap(),
        ..ConfigMap::default()
    };
    let stray = make(&api, "stray", &[&phantom], false).await;
    gone(&api, &stray).await;
}

#[tokio::test]
async fn a_foreground_owner_waits_for_its_blocking_dependents() {
    let server = ApiServer::builder().start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(server.client().unwrap(), "default");
    let owner = make(&api, "owner", &[], false).await;
    let blocker = make(&api, "blocker", &[&owner], true).await;
    // The blocker is held by a finalizer of its own, so the owner must wait.
    api.patch(
        "blocker",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
    )
    .await
    .unwrap();
    let answer = api
        .delete("owner", &DeleteParams::foreground())
        .await
        .unwrap()
        .left()
        .expect("the owner stays for now");
    assert!(answer.metadata.deletion_timestamp.is_some());
    assert_eq!(
        answer.metadata.finalizers.as_deref(),
        Some(&["foregroundDeletion".to_string()][..])
    );
    // The collector deletes the blocker (its finalizer keeps it), and the owner keeps waiting.
    common::eventually(WAIT, "the blocking dependent being deleted", || async {
        let now = api.get("blocker").await.unwrap();
        now.metadata.deletion_timestamp.map(|_| ())
    })
    .await;
    assert!(api.get_opt("owner").await.unwrap().is_some());
    // The blocker's holder lets go: the blocker goes, then the owner.
    api.patch(
        "blocker",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    gone(&api, &blocker).await;
    gone(&api, &owner).await;
}
