//! The project listing a resync wave shares is a snapshot up to its refresh interval old. It may
//! answer for a load balancer of ours that kube-lb has not changed since, but it must never be
//! the ground for refusing a Service's name: that refusal is a user error, which waits for the
//! Service to change, so a name freed after the listing was taken would block the Service for
//! good. Seen in the chaos suite: a Service deleted and recreated under the same name within
//! one listing's life was refused with "belongs to Service UID <the deleted one>".

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::time::Duration;

use kube_lb_provider_core::LoadBalancerProvider;
use serde_json::json;
use support::*;

/// Longer than the test: the listing taken mid-test is still the wave's when the new Service
/// is ensured.
const LONG_REFRESH: Duration = Duration::from_secs(600);

const DELETED_UID: &str = "3554f1d8-8d1b-489e-8fe5-1597779491f6";
const RECREATED_UID: &str = "bcbc4996-7491-4d05-9862-3d0747c90406";
const NEIGHBOUR_UID: &str = "0c6a7e21-52d4-4f0e-9a1b-6d3e8f9a0b1c";

#[tokio::test]
async fn a_service_recreated_under_a_freed_name_gets_a_new_load_balancer() {
    // (case, whether the replica holding the listing deleted the old load balancer itself, or
    // another replica did while this one was not leading; the UID of the Service ensured
    // next: a new Service under the old name, or the same one retyped away and back)
    for (case, deleted_here, next_uid) in [
        (
            "deleted by the replica holding the listing",
            true,
            RECREATED_UID,
        ),
        ("deleted by another replica", false, RECREATED_UID),
        (
            "released on a retype, then a load balancer again",
            true,
            DELETED_UID,
        ),
    ] {
        let h = harness().await;
        // Reads everything live: the replica that made the old load balancer, and in the
        // second case the one that deletes it.
        let other_replica = h.provider.clone().with_listing_refresh(Duration::ZERO);
        let this_replica = h.provider.clone().with_listing_refresh(LONG_REFRESH);

        let deleted = svc("web", DELETED_UID);
        other_replica
            .ensure(&deleted.spec(), &nodes(2))
            .await
            .unwrap();
        // Another Service's ensure takes the wave's listing: it shows web's load balancer,
        // owned by the Service about to be deleted.
        this_replica
            .ensure(&svc("api", NEIGHBOUR_UID).spec(), &nodes(2))
            .await
            .unwrap();

        let deleter = if deleted_here {
            &this_replica
        } else {
            &other_replica
        };
        deleter.delete(&deleted.key()).await.unwrap();
        let name = format!("kube_service_{CLUSTER}_default_web");
        assert!(
            h.cloud
                .load_balancers()
                .iter()
                .all(|lb| lb["name"] != json!(name)),
            "{case}: the delete removed the old load balancer"
        );

        let recreated = svc("web", next_uid);
        let ensured = this_replica.ensure(&recreated.spec(), &nodes(2)).await;
        assert!(
            ensured.is_ok(),
            "{case}: the Service was not ensured: {:?}",
            ensured.err()
        );
        let lb = lb_named(&h.cloud, &name);
        assert!(
            lb["tags"]
                .as_array()
                .unwrap()
                .contains(&json!(format!("kube_lb_uid_{next_uid}"))),
            "{case}: a new load balancer, the Service's: {lb:#}"
        );
    }
}

#[tokio::test]
async fn a_name_taken_by_someone_else_is_still_refused_when_the_listing_shows_it() {
    // The live read that confirms a refusal confirms a real one: the refusal stays.
    let h = harness().await;
    let other_replica = h.provider.clone().with_listing_refresh(Duration::ZERO);
    let provider = h.provider.clone().with_listing_refresh(LONG_REFRESH);
    let owner = svc("web", DELETED_UID);
    other_replica
        .ensure(&owner.spec(), &nodes(2))
        .await
        .unwrap();
    // The listing this takes shows web's load balancer, owned by another Service.
    provider
        .ensure(&svc("api", NEIGHBOUR_UID).spec(), &nodes(2))
        .await
        .unwrap();

    let error = provider
        .ensure(&svc("web", RECREATED_UID).spec(), &nodes(2))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains(DELETED_UID),
        "refused, naming the owner: {error}"
    );
}
