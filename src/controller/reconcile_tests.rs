//! Tests of what the reconcile shell decides from the Service alone.

use k8s_openapi::api::core::v1::ServiceSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube_lb_annotations::Cloud;

use super::*;
use crate::controller::ControllerConfig;
use crate::controller::decide::skip_ensure;

fn svc(type_: &str, class: Option<&str>, finalized: bool, deleting: bool) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("u-1".into()),
            finalizers: finalized.then(|| vec![FINALIZER.to_string()]),
            deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some(type_.into()),
            load_balancer_class: class.map(String::from),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn dispositions() {
    let config = ControllerConfig::new(Cloud::Local);
    let cases = [
        (svc("LoadBalancer", None, false, false), Disposition::Manage),
        (svc("LoadBalancer", None, true, false), Disposition::Manage),
        (svc("LoadBalancer", None, true, true), Disposition::Manage),
        (svc("LoadBalancer", None, false, true), Disposition::Ignore),
        (svc("ClusterIP", None, false, false), Disposition::Ignore),
        (svc("ClusterIP", None, true, false), Disposition::Release),
        (svc("NodePort", None, true, true), Disposition::Manage),
        (
            svc("LoadBalancer", Some("other.io/x"), false, false),
            Disposition::Ignore,
        ),
        (
            svc("LoadBalancer", Some("other.io/x"), true, false),
            Disposition::Release,
        ),
    ];
    for (service, want) in cases {
        assert_eq!(
            Disposition::of(&service, &config),
            want,
            "{:?}",
            service.spec
        );
    }
}

#[test]
fn ensure_is_skipped_only_when_nothing_it_depends_on_changed() {
    use k8s_openapi::api::core::v1::{LoadBalancerStatus, ServiceStatus};
    let now = Instant::now();
    let resync = std::time::Duration::from_secs(600);
    let ingress = vec![LoadBalancerIngress {
        ip: Some("127.240.0.1".into()),
        ..Default::default()
    }];
    let with_status = |ingress: Vec<LoadBalancerIngress>| {
        let mut s = svc("LoadBalancer", None, true, false);
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(ingress),
            }),
            ..Default::default()
        });
        s
    };
    let shown = with_status(ingress.clone());
    let cleared = svc("LoadBalancer", None, true, false);
    let edited = with_status(vec![LoadBalancerIngress {
        ip: Some("192.0.2.1".into()),
        ..Default::default()
    }]);
    let synced = Synced {
        hashes: (1, 2),
        ingress,
        fresh_until: now + resync,
    };
    let second = std::time::Duration::from_secs(1);
    // (case, last ensure, hashes now, Service now, time, expected skip)
    let cases = [
        ("in sync", Some(&synced), (1, 2), &shown, now, Some(resync)),
        ("never ensured (or failed)", None, (1, 2), &shown, now, None),
        ("spec changed", Some(&synced), (9, 2), &shown, now, None),
        ("backends changed", Some(&synced), (1, 9), &shown, now, None),
        ("status cleared", Some(&synced), (1, 2), &cleared, now, None),
        ("status edited", Some(&synced), (1, 2), &edited, now, None),
        (
            "just before the resync",
            Some(&synced),
            (1, 2),
            &shown,
            now + resync - second,
            Some(second),
        ),
        (
            "resync due",
            Some(&synced),
            (1, 2),
            &shown,
            now + resync,
            None,
        ),
    ];
    for (case, last, hashes, service, at, want) in cases {
        assert_eq!(skip_ensure(last, hashes, service, at), want, "{case}");
    }
}

#[test]
fn service_key_and_fingerprints() {
    let s = svc("LoadBalancer", None, false, false);
    let key = service_key(&s).unwrap();
    assert_eq!(
        (key.namespace.as_str(), key.name.as_str(), key.uid.as_str()),
        ("default", "web", "u-1")
    );
    let mut annotated = s.clone();
    annotated
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("a".into(), "b".into());
    assert_ne!(user_fingerprint(&s), user_fingerprint(&annotated));
    let mut status_only = s.clone();
    status_only.status = Some(Default::default());
    assert_eq!(
        user_fingerprint(&s),
        user_fingerprint(&status_only),
        "status is not the user's"
    );
    let mut nameless = s;
    nameless.metadata.uid = None;
    assert!(matches!(
        service_key(&nameless),
        Err(Error::MissingField("uid"))
    ));
}
