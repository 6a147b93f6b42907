//! kube-rs against the server over real HTTP: CRUD, every patch type, status, finalizers,
//! 422s, selectors, paging.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeSet;

use common::{lb_service, service};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_lb_apiserver::{ApiServer, RunningApiServer};
use serde_json::json;

/// A fresh server holding the LoadBalancer Service `default/web` (port 80), and its Services
/// API (valid while the server is kept).
async fn serving_web() -> (RunningApiServer, Api<Service>) {
    let server = ApiServer::builder().start().await.unwrap();
    let services: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    services
        .create(&PostParams::default(), &lb_service("web", 80))
        .await
        .unwrap();
    (server, services)
}

fn api_error(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn create_get_update_delete_service() {
    let server = ApiServer::builder().start().await.unwrap();
    let services: Api<Service> = Api::namespaced(server.client().unwrap(), "default");

    let created = services
        .create(&PostParams::default(), &lb_service("web", 80))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some());
    assert!(meta.creation_timestamp.is_some());
    let rv1: u64 = meta.resource_version.as_deref().unwrap().parse().unwrap();
    let spec = created.spec.as_ref().unwrap();
    assert!(spec.cluster_ip.as_deref().unwrap().starts_with("10."));
    let port = &spec.ports.as_ref().unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert!(port.node_port.is_some());
    assert_eq!(spec.external_traffic_policy.as_deref(), Some("Cluster"));

    // Duplicate create is 409 AlreadyExists.
    let err = api_error(
        services
            .create(&PostParams::default(), &lb_service("web", 80))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));

    // Replace with the current resourceVersion works and bumps it; a stale one is 409 Conflict.
    let mut changed = created.clone();
    changed.metadata.labels = Some([("tier".to_string(), "front".to_string())].into());
    let replaced = services
        .replace("web", &PostParams::default(), &changed)
        .await
        .unwrap();
    let rv2: u64 = replaced
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1);
    let err = api_error(
        services
            .replace("web", &PostParams::default(), &changed)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));

    // Status written through the main resource is ignored.
    let mut with_status = replaced.clone();
    with_status.status =
        serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}}))
            .unwrap();
    let after = services
        .replace("web", &PostParams::default(), &with_status)
        .await
        .unwrap();
    assert!(
        after
            .status
            .unwrap()
            .load_balancer
            .unwrap()
            .ingress
            .is_none()
    );

    let got = services.get("web").await.unwrap();
    assert_eq!(got.metadata.labels.unwrap()["tier"], "front");

    let deleted = services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    assert!(deleted.is_right(), "no finalizers: gone immediately");
    let err = api_error(services.get("web").await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    assert_eq!(err.message, "services \"web\" not found");
}

#[tokio::test]
async fn every_patch_type() {
    let (_server, services) = serving_web().await;
    let pp = PatchParams::default();

    let merged = services
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"metadata": {"annotations": {"a": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.metadata.annotations.unwrap()["a"], "1");

    let json_patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/labels", "value": {"via": "json-patch"}}
    ]))
    .unwrap();
    let patched = services
        .patch("web", &pp, &Patch::<()>::Json(json_patch))
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["via"], "json-patch");

    // Strategic: ports merge by port number, keeping the allocated nodePort of port 80.
    let before = services.get("web").await.unwrap();
    let np80 = before.spec.unwrap().ports.unwrap()[0].node_port;
    let strategic = services
        .patch(
            "web",
            &pp,
            &Patch::Strategic(json!({"spec": {"ports": [{"name": "https", "port": 443}]}})),
        )
        .await
        .unwrap();
    let ports = strategic.spec.unwrap().ports.unwrap();
    assert_eq!(ports.len(), 2);
    assert_eq!(ports[0].node_port, np80);
    assert!(ports[1].node_port.is_some());

    // Finalizers merge as a set.
    let fin = services
        .patch(
            "web",
            &pp,
            &Patch::Strategic(json!({"metadata": {"finalizers": ["a.example/x"]}})),
        )
        .await
        .unwrap();
    assert_eq!(fin.metadata.finalizers.unwrap(), vec!["a.example/x"]);
    let fin = services
        .patch(
            "web",
            &pp,
            &Patch::Strategic(json!({"metadata": {"finalizers": ["b.example/y"]}})),
        )
        .await
        .unwrap();
    assert_eq!(
        fin.metadata.finalizers.unwrap(),
        vec!["a.example/x", "b.example/y"]
    );

    // Server-side apply of a new object creates it; applying again merges.
    let ssa = PatchParams::apply("kube-lb-test").force();
    let applied = services
        .patch(
            "applied",
            &ssa,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "applied"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 53, "protocol": "UDP"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(
        applied.spec.as_ref().unwrap().ports.as_ref().unwrap()[0]
            .protocol
            .as_deref(),
        Some("UDP")
    );
    let applied = services
        .patch(
            "applied",
            &ssa,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "applied", "labels": {"x": "y"}},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 53, "protocol": "UDP"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(applied.metadata.labels.unwrap()["x"], "y");

    // Status patch changes only status.
    let status = services
        .patch_status(
            "web",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"ignored": "yes"}}, "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        status
            .status
            .unwrap()
            .load_balancer
            .unwrap()
            .ingress
            .unwrap()[0]
            .ip
            .as_deref(),
        Some("192.0.2.1")
    );
    assert!(!status.metadata.labels.unwrap().contains_key("ignored"));

    // Server-side apply of status: what the manager stops applying is removed.
    let status_ssa = PatchParams::apply("lb-controller").force();
    let apply_status = |load_balancer: serde_json::Value| {
        let (services, status_ssa) = (services.clone(), status_ssa.clone());
        async move {
            services
                .patch_status(
                    "applied",
                    &status_ssa,
                    &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service",
                        "status": {"loadBalancer": load_balancer}})),
                )
                .await
                .unwrap()
        }
    };
    let ingress = |service: &Service| {
        service
            .status
            .clone()
            .unwrap()
            .load_balancer
            .unwrap()
            .ingress
    };
    let applied = apply_status(json!({"ingress": [{"ip": "192.0.2.9"}]})).await;
    assert_eq!(
        ingress(&applied).unwrap()[0].ip.as_deref(),
        Some("192.0.2.9")
    );
    let cleared = apply_status(json!({})).await;
    assert!(ingress(&cleared).is_none());
    // The spec applied by the other manager is untouched.
    assert_eq!(cleared.metadata.labels.as_ref().unwrap()["x"], "y");
    // Re-applying the same status is a no-op: no new resourceVersion, so no watch event.
    let again = apply_status(json!({})).await;
    assert_eq!(
        again.metadata.resource_version,
        cleared.metadata.resource_version
    );

    // A merge patch with a stale resourceVersion is a conflict.
    let err = api_error(
        services
            .patch(
                "web",
                &pp,
                &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let server = ApiServer::builder().start().await.unwrap();
    let services: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    let mut svc = lb_service("held", 80);
    svc.metadata.finalizers = Some(vec!["service.kube-lb.io/load-balancer".to_string()]);
    let created = services.create(&PostParams::default(), &svc).await.unwrap();
    let node_port = created.spec.unwrap().ports.unwrap()[0].node_port.unwrap();

    let first = services
        .delete("held", &DeleteParams::default())
        .await
        .unwrap();
    let marked = first.left().expect("held by its finalizer");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(services.get("held").await.is_ok());

    // No new finalizers while deleting.
    let err = api_error(
        services
            .patch(
                "held",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": ["service.kube-lb.io/load-balancer", "other/x"]}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);

    services
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "remove", "path": "/metadata/finalizers"}]))
                    .unwrap(),
            ),
        )
        .await
        .unwrap();
    let err = api_error(services.get("held").await.unwrap_err());
    assert_eq!(err.code, 404);
    // Its node port went back to the pool: a new Service may ask for it.
    let reuse = service(
        "reuse",
        json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": node_port}]}),
    );
    services
        .create(&PostParams::default(), &reuse)
        .await
        .unwrap();
}

#[tokio::test]
async fn invalid_services_are_rejected_with_causes() {
    let server = ApiServer::builder().start().await.unwrap();
    let services: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    let cases = vec![
        (
            service(
                "bad-name",
                json!({"ports": [{"name": "HTTP_port", "port": 80}]}),
            ),
            vec!["spec.ports[0].name"],
        ),
        (
            service("unnamed", json!({"ports": [{"port": 80}, {"port": 443}]})),
            vec!["spec.ports[0].name", "spec.ports[1].name"],
        ),
        (
            service(
                "out-of-range",
                json!({"clusterIP": "192.168.1.1", "ports": [{"port": 80}]}),
            ),
            vec!["spec.clusterIPs"],
        ),
        (
            service(
                "bad-node-port",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 1000}]}),
            ),
            vec!["spec.ports[0].nodePort"],
        ),
    ];
    for (svc, fields) in cases {
        let name = svc.metadata.name.clone().unwrap();
        let err = api_error(
            services
                .create(&PostParams::default(), &svc)
                .await
                .unwrap_err(),
        );
        assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"), "{name}");
        let status: serde_json::Value = reqwest::get(format!(
            "{}/api/v1/namespaces/default/services/{name}",
            server.url()
        ))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        assert_eq!(status["code"], 404, "{name} must not have been stored");
        // The causes are in the Status body; fetch them over raw HTTP to check the fields.
        let raw = reqwest::Client::new()
            .post(format!(
                "{}/api/v1/namespaces/default/services",
                server.url()
            ))
            .json(&svc)
            .send()
            .await
            .unwrap();
        assert_eq!(raw.status().as_u16(), 422);
        let body: serde_json::Value = raw.json().await.unwrap();
        let got: Vec<&str> = body["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["field"].as_str().unwrap())
            .collect();
        assert_eq!(got, fields, "{name}: {body}");
    }
}

/// What kube-apiserver answers for a refused write, read over raw HTTP: status code, reason
/// and the field of every cause.
async fn refused(
    server: &kube_lb_apiserver::RunningApiServer,
    path: &str,
    body: serde_json::Value,
) -> (u16, String, Vec<String>) {
    let raw = reqwest::Client::new()
        .post(format!("{}{path}", server.url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    let code = raw.status().as_u16();
    let status: serde_json::Value = raw.json().await.unwrap();
    let fields = status["details"]["causes"]
        .as_array()
        .map(|causes| {
            causes
                .iter()
                .map(|c| c["field"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    (
        code,
        status["reason"].as_str().unwrap_or_default().to_string(),
        fields,
    )
}

#[tokio::test]
async fn invalid_endpoints_and_slices_are_refused_over_http_with_field_paths() {
    let server = ApiServer::builder().start().await.unwrap();
    let services: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    services
        .create(
            &PostParams::default(),
            &service(
                "dns",
                json!({"clusterIP": "10.96.0.10", "ports": [{"port": 53}]}),
            ),
        )
        .await
        .unwrap();
    let endpoints = |name: &str, ip: &str| {
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name},
               "subsets": [{"addresses": [{"ip": ip}], "ports": [{"port": 80}]}]})
    };
    let slice = |name: &str, family: &str, ip: &str| {
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": name, "labels": {"kubernetes.io/service-name": "web"}},
               "addressType": family, "ports": [{"port": 80}],
               "endpoints": [{"addresses": [ip]}]})
    };
    let core = "/api/v1/namespaces/default/endpoints";
    let discovery = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";
    let cases = [
        (
            core,
            endpoints("loopback", "127.0.0.1"),
            "subsets[0].addresses[0].ip",
        ),
        (
            core,
            endpoints("link-local", "169.254.1.1"),
            "subsets[0].addresses[0].ip",
        ),
        (
            core,
            endpoints("multicast", "224.0.0.5"),
            "subsets[0].addresses[0].ip",
        ),
        (
            core,
            endpoints("v6-loopback", "::1"),
            "subsets[0].addresses[0].ip",
        ),
        (
            core,
            endpoints("cluster-ip", "10.96.0.10"),
            "subsets[0].addresses[0].ip",
        ),
        (
            discovery,
            slice("loopback", "IPv4", "127.0.0.2"),
            "endpoints[0].addresses[0]",
        ),
        (
            discovery,
            slice("v6-link-local", "IPv6", "fe80::1"),
            "endpoints[0].addresses[0]",
        ),
        (
            discovery,
            slice("family", "IPv4", "2001:db8::1"),
            "endpoints[0].addresses[0]",
        ),
    ];
    for (path, body, field) in cases {
        let name = body["metadata"]["name"].as_str().unwrap().to_string();
        let (code, reason, fields) = refused(&server, path, body).await;
        assert_eq!((code, reason.as_str()), (422, "Invalid"), "{path} {name}");
        assert_eq!(fields, [field], "{path} {name}");
        let stored = reqwest::get(format!("{}{path}/{name}", server.url()))
            .await
            .unwrap()
            .status();
        assert_eq!(
            stored.as_u16(),
            404,
            "{path} {name} must not have been stored"
        );
    }
    // The same objects with an ordinary address are stored.
    assert_eq!(
        refused(&server, core, endpoints("fine", "10.244.0.5"))
            .await
            .0,
        201
    );
    assert_eq!(
        refused(&server, discovery, slice("fine", "IPv4", "10.244.0.5"))
            .await
            .0,
        201
    );
}

#[tokio::test]
async fn other_resources_and_selectors() {
    let server = ApiServer::builder().start().await.unwrap();
    let client = server.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, zone) in [("n1", "a"), ("n2", "b"), ("n3", "a")] {
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(
                    json!({"metadata": {"name": name, "labels": {"zone": zone}},
                    "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.2"}]}}),
                )
                .unwrap(),
            )
            .await
            .unwrap();
    }
    let zone_a = nodes
        .list(&ListParams::default().labels("zone in (a)"))
        .await
        .unwrap();
    assert_eq!(zone_a.items.len(), 2);
    let not_a = nodes
        .list(&ListParams::default().labels("zone notin (a)"))
        .await
        .unwrap();
    assert_eq!(not_a.items.len(), 1);
    let by_name = nodes
        .list(&ListParams::default().fields("metadata.name=n2"))
        .await
        .unwrap();
    assert_eq!(by_name.items[0].metadata.name.as_deref(), Some("n2"));
    // Node status survives create (kube-apiserver keeps it for nodes).
    let n1 = nodes.get("n1").await.unwrap();
    assert_eq!(
        n1.status.unwrap().addresses.unwrap()[0].address,
        "127.0.0.2"
    );

    // Paging: three pages of one node each, all at the first page's version.
    let mut seen = BTreeSet::new();
    let mut params = ListParams::default().limit(1);
    loop {
        let page = nodes.list(&params).await.unwrap();
        for n in &page.items {
            seen.insert(n.metadata.name.clone().unwrap());
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    assert_eq!(seen.len(), 3);

    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let slice = slices
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"generateName": "web-", "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.1"]}], "ports": [{"port": 8080}]}))
            .unwrap(),
        )
        .await
        .unwrap();
    let name = slice.metadata.name.unwrap();
    assert!(name.starts_with("web-") && name.len() == 9, "{name}");
    let all_slices: Api<EndpointSlice> = Api::all(client.clone());
    assert_eq!(
        all_slices
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    let leases: Api<Lease> = Api::namespaced(client, "kube-system");
    let lease = leases
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "kube-lb"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("a"));
}

#[tokio::test]
async fn delete_collection_and_namespace_cleanup() {
    use k8s_openapi::api::core::v1::Namespace;
    let server = ApiServer::builder().start().await.unwrap();
    let client = server.client().unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
        )
        .await
        .unwrap();
    let team: Api<Service> = Api::namespaced(client.clone(), "team");
    for (name, tier) in [("a", "front"), ("b", "front"), ("c", "back")] {
        let mut svc = lb_service(name, 80);
        svc.metadata.namespace = Some("team".into());
        svc.metadata.labels = Some([("tier".to_string(), tier.to_string())].into());
        team.create(&PostParams::default(), &svc).await.unwrap();
    }
    let deleted = team
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("tier=front"),
        )
        .await
        .unwrap();
    let names: Vec<String> = deleted
        .left()
        .unwrap()
        .items
        .into_iter()
        .map(|s| s.metadata.name.unwrap())
        .collect();
    assert_eq!(names, vec!["a", "b"]);
    assert_eq!(
        team.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    // Deleting the namespace removes what is left in it; other namespaces are untouched.
    let default_ns: Api<Service> = Api::namespaced(client, "default");
    default_ns
        .create(&PostParams::default(), &lb_service("elsewhere", 80))
        .await
        .unwrap();
    namespaces
        .delete("team", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        team.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(
        default_ns
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
}

#[tokio::test]
async fn malformed_requests_get_status_errors() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let url = format!("{}/api/v1/namespaces/default/services", server.url());
    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            http.post(&url)
                .json(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})),
            400,
            "BadRequest",
        ),
        (http.post(&url).body("{not json"), 400, "BadRequest"),
        (
            http.post(&url).json(
                &json!({"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": 80}]}}),
            ),
            422,
            "Invalid",
        ),
        (
            http.patch(format!("{url}/missing"))
                .header("content-type", "application/merge-patch+json")
                .body("{}"),
            404,
            "NotFound",
        ),
        (
            http.patch(format!("{url}/missing"))
                .header("content-type", "text/plain")
                .body("{}"),
            415,
            "UnsupportedMediaType",
        ),
        (
            http.get(format!("{}/api/v1/nothings", server.url())),
            404,
            "NotFound",
        ),
        (
            http.get(format!("{url}?labelSelector=a%20in%20(b")),
            400,
            "BadRequest",
        ),
        (
            http.get(format!("{url}?resourceVersion=notanumber&watch=true")),
            400,
            "BadRequest",
        ),
    ];
    for (request, code, reason) in cases {
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), code);
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["kind"], "Status");
        assert_eq!(
            (body["code"].as_u64(), body["reason"].as_str()),
            (Some(code.into()), Some(reason)),
            "{body}"
        );
    }
}

/// Service `status.conditions` written through `/status` are kept as written when valid (a
/// strategic merge by `type` leaves other conditions alone, `$patch: delete` removes one) and
/// refused with 422 naming each bad field otherwise, as kube-apiserver's `ValidateConditions`.
#[tokio::test]
async fn service_status_conditions_are_merged_by_type_and_validated() {
    let (_server, services) = serving_web().await;
    let pp = PatchParams::default();
    let ready = json!({"type": "kube-lb.io/LoadBalancerReady", "status": "True", "reason": "Provisioned",
        "message": "ready", "lastTransitionTime": "2026-01-01T00:00:00Z"});
    let other = json!({"type": "example.com/Other", "status": "False", "reason": "Nope",
        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"});
    for condition in [&ready, &other] {
        services
            .patch_status(
                "web",
                &pp,
                &Patch::Strategic(json!({"status": {"conditions": [condition]}})),
            )
            .await
            .unwrap();
    }
    let types = |svc: Service| -> Vec<String> {
        svc.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.type_)
            .collect()
    };
    let both = services.get("web").await.unwrap();
    assert_eq!(
        types(both),
        ["kube-lb.io/LoadBalancerReady", "example.com/Other"]
    );
    let removed = services
        .patch_status(
            "web",
            &pp,
            &Patch::Strategic(json!({"status": {"conditions": [
                {"type": "kube-lb.io/LoadBalancerReady", "$patch": "delete"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(types(removed), ["example.com/Other"]);

    let bad = json!({"type": "a/b/c", "status": "Yes", "reason": "not a reason!",
        "message": "x".repeat(32 * 1024 + 1), "lastTransitionTime": "2026-01-01T00:00:00Z"});
    let error = api_error(
        services
            .patch_status(
                "web",
                &pp,
                &Patch::Strategic(json!({"status": {"conditions": [bad]}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (error.code, error.reason.as_str()),
        (422, "Invalid"),
        "{error:?}"
    );
    // Merged by type after the one kept: index 1.
    for field in [
        "status.conditions[1].type",
        "status.conditions[1].status",
        "status.conditions[1].reason",
        "status.conditions[1].message",
    ] {
        assert!(
            error.message.contains(field),
            "{field} in {}",
            error.message
        );
    }
    let missing_time = json!({"type": "Ready", "status": "True", "reason": "X", "message": ""});
    let error = api_error(
        services
            .patch_status(
                "web",
                &pp,
                &Patch::Merge(json!({"status": {"conditions": [missing_time]}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(error.code, 422, "{error:?}");
    assert!(
        error
            .message
            .contains("status.conditions[0].lastTransitionTime"),
        "{}",
        error.message
    );
    // Nothing refused was stored.
    let after = services.get("web").await.unwrap();
    assert_eq!(types(after), ["example.com/Other"]);
}

/// The fields a 422's causes name, in order.
fn cause_fields(status: &kube::core::Status) -> Vec<String> {
    status
        .details
        .as_ref()
        .map(|details| details.causes.iter().map(|c| c.field.clone()).collect())
        .unwrap_or_default()
}

/// The Status of a create that must be refused.
async fn refused_create<K>(api: &Api<K>, object: &K) -> kube::core::Status
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    api_error(
        api.create(&PostParams::default(), object)
            .await
            .unwrap_err(),
    )
}

/// Every kind's metadata is checked as kube-apiserver's ObjectMeta validation does: label keys
/// and values, annotation keys, owner references and finalizer names, on create and on update
/// (a Service's selector by the label rules too). Metadata causes come first in the same 422
/// as the kind's own, and a refused create keeps nothing it would have allocated.
#[tokio::test]
async fn metadata_is_validated_like_kube_apiserver() {
    let server = ApiServer::builder().start().await.unwrap();
    let client = server.client().unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let causes = cause_fields;

    // A bad label and a bad port: one 422 naming both, the label first.
    let bad_label = || Some([("bad label".to_string(), "x".to_string())].into());
    let mut bad = service(
        "web",
        json!({"selector": {"app": "web"}, "ports": [{"port": 0}, {"name": "b", "port": 81}]}),
    );
    bad.metadata.labels = bad_label();
    let error = refused_create(&services, &bad).await;
    assert_eq!(
        (error.code, error.reason.as_str()),
        (422, "Invalid"),
        "{error:?}"
    );
    assert_eq!(causes(&error)[0], "metadata.labels", "{error:?}");
    assert!(
        causes(&error).contains(&"spec.ports[0].port".to_string()),
        "{error:?}"
    );
    assert!(
        error.message.contains(
            "Invalid value: \"bad label\": name part must consist of alphanumeric characters"
        ),
        "{}",
        error.message
    );
    // A bad label on an otherwise valid NodePort Service: refused, and its node port is not
    // kept allocated.
    let node_port = || {
        service(
            "web",
            json!({"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80, "nodePort": 30555}]}),
        )
    };
    let mut bad = node_port();
    bad.metadata.labels = bad_label();
    let error = refused_create(&services, &bad).await;
    assert_eq!(causes(&error), ["metadata.labels"], "{error:?}");
    services
        .create(&PostParams::default(), &node_port())
        .await
        .unwrap();

    // The selector follows the label rules.
    let selector = service(
        "sel",
        json!({"selector": {"app": "not a value"}, "ports": [{"port": 80}]}),
    );
    let error = refused_create(&services, &selector).await;
    assert_eq!(causes(&error), ["spec.selector"], "{error:?}");

    // Updates: a label value, an annotation key, an owner reference without a uid.
    for (patch, field) in [
        (
            json!({"metadata": {"labels": {"tier": "-front"}}}),
            "metadata.labels",
        ),
        (
            json!({"metadata": {"annotations": {"no spaces": "x"}}}),
            "metadata.annotations",
        ),
        (
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": ""}]}}),
            "metadata.ownerReferences.uid",
        ),
    ] {
        let error = api_error(
            services
                .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap_err(),
        );
        assert_eq!(causes(&error), [field], "{patch}: {error:?}");
    }
    let stored = services.get("web").await.unwrap();
    assert!(stored.metadata.annotations.is_none() && stored.metadata.owner_references.is_none());
    // Valid metadata still goes through.
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"example.com/tier": "front_1"},
                                             "annotations": {"Example.com/Note": "any text"}}}),
            ),
        )
        .await
        .unwrap();

    // Other kinds: a finalizer name on create, and a core/v1 Event (whose own rules say nothing
    // about labels) still gets the generic ones.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let lease: Lease = serde_json::from_value(
        json!({"metadata": {"name": "l", "finalizers": ["bad finalizer"]}, "spec": {}}),
    )
    .unwrap();
    let error = refused_create(&leases, &lease).await;
    assert_eq!(causes(&error), ["metadata.finalizers"], "{error:?}");
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, "default");
    let event: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "e", "labels": {"k": "bad value!"}},
        "involvedObject": {"kind": "Service", "name": "web", "namespace": "default"},
        "reason": "Test", "message": "m", "type": "Normal", "source": {"component": "test"},
    }))
    .unwrap();
    let error = refused_create(&events, &event).await;
    assert_eq!(causes(&error), ["metadata.labels"], "{error:?}");
}

/// An object copied from a read (it names a resourceVersion) is refused on create with the
/// plain 500 kube-apiserver's storage gives; `0`, a dry run and seeded manifests pass.
#[tokio::test]
async fn a_create_naming_a_resource_version_is_refused() {
    let server = ApiServer::builder().start().await.unwrap();
    let services: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    let with_version = |name: &str, version: &str| {
        let mut object = lb_service(name, 80);
        object.metadata.resource_version = Some(version.to_string());
        object
    };
    let error = refused_create(&services, &with_version("copied", "5")).await;
    assert_eq!(error.code, 500, "{error:?}");
    assert_eq!(error.reason, "", "{error:?}");
    assert_eq!(
        error.message,
        "resourceVersion should not be set on objects to be created"
    );
    assert!(services.get_opt("copied").await.unwrap().is_none());
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    services
        .create(&dry_run, &with_version("copied", "5"))
        .await
        .unwrap();
    let created = services
        .create(&PostParams::default(), &with_version("zero", "0"))
        .await
        .unwrap();
    assert_ne!(created.metadata.resource_version.as_deref(), Some("0"));
    let mut recorded = serde_json::to_value(with_version("recorded", "12345")).unwrap();
    recorded["apiVersion"] = json!("v1");
    recorded["kind"] = json!("Service");
    server.seed(recorded).unwrap();
    assert!(services.get_opt("recorded").await.unwrap().is_some());
}

/// ConfigMaps, Nodes and Leases are checked as kube-apiserver checks them (config keys, taints
/// and pod CIDRs, lease durations), and a Node given only `podCIDR` gets `podCIDRs` too.
#[tokio::test]
async fn config_maps_nodes_and_leases_are_validated() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let server = ApiServer::builder().start().await.unwrap();
    let client = server.client().unwrap();
    let fields = cause_fields;

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let bad: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"a b": "x"}})).unwrap();
    let error = refused_create(&config_maps, &bad).await;
    assert_eq!(fields(&error), ["data[a b]"], "{error:?}");

    let nodes: Api<Node> = Api::all(client.clone());
    let bad: Node = serde_json::from_value(json!({"metadata": {"name": "n1"},
        "spec": {"taints": [{"key": "dedicated", "effect": "Sometimes"}]}}))
    .unwrap();
    let error = refused_create(&nodes, &bad).await;
    assert_eq!(fields(&error), ["metadata.taints[0].effect"], "{error:?}");
    let node: Node = serde_json::from_value(
        json!({"metadata": {"name": "n1"}, "spec": {"podCIDR": "10.244.1.0/24"}}),
    )
    .unwrap();
    let created = nodes.create(&PostParams::default(), &node).await.unwrap();
    assert_eq!(
        created.spec.unwrap().pod_cidrs,
        Some(vec!["10.244.1.0/24".to_string()])
    );

    let leases: Api<Lease> = Api::namespaced(client, "default");
    let bad: Lease = serde_json::from_value(
        json!({"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0}}),
    )
    .unwrap();
    let error = refused_create(&leases, &bad).await;
    assert_eq!(fields(&error), ["spec.leaseDurationSeconds"], "{error:?}");
}

/// The NamespaceLifecycle admission plugin's rules: new content needs an existing namespace
/// (404 naming it, by create, by server-side apply and by a PUT that creates), and `default`,
/// `kube-system` and `kube-public` may not be deleted (403).
#[tokio::test]
async fn namespaces_must_exist_for_new_content_and_the_system_ones_stay() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    let server = ApiServer::builder().start().await.unwrap();
    let client = server.client().unwrap();
    let config_map: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"k": "v"}})).unwrap();

    let missing: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    let error = refused_create(&missing, &config_map).await;
    assert_eq!(
        (error.code, error.reason.as_str()),
        (404, "NotFound"),
        "{error:?}"
    );
    assert_eq!(error.message, "namespaces \"nowhere\" not found");
    let applied = missing
        .patch(
            "c",
            &PatchParams::apply("test"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(api_error(applied).code, 404);
    assert!(
        missing
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // Once the namespace exists, the same create goes through.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "nowhere"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    missing
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();

    for name in ["default", "kube-system", "kube-public"] {
        let error = api_error(
            namespaces
                .delete(name, &DeleteParams::default())
                .await
                .unwrap_err(),
        );
        assert_eq!(
            (error.code, error.reason.as_str()),
            (403, "Forbidden"),
            "{error:?}"
        );
        assert_eq!(
            error.message,
            format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted")
        );
        assert!(namespaces.get(name).await.is_ok());
    }
}
