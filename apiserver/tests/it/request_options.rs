//! List, watch and write options over raw HTTP, checked against what kube-apiserver 1.33
//! answers (status code, `Status` reason, details and causes): `ValidateListOptions`,
//! streaming lists (`sendInitialEvents`), expired continue tokens, and the `dryRun`,
//! `force`, `fieldManager` and `propagationPolicy` options of writes.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{call, get, merge_patch, post, put};
use kube_lb_apiserver::ApiServer;
use serde_json::{Value, json};

/// Reads a whole watch stream (the request must carry `timeoutSeconds`) as its events.
async fn watch_events(http: &reqwest::Client, url: &str) -> Vec<Value> {
    let response = http.get(url).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "{url}");
    let text = response.text().await.unwrap();
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

async fn create_config_maps(http: &reqwest::Client, base: &str, names: &[&str]) {
    for name in names {
        let (code, body) = post(
            http,
            &format!("{base}/api/v1/namespaces/default/configmaps"),
            json!({"metadata": {"name": name}, "data": {"k": "v"}}),
        )
        .await;
        assert_eq!(code, 201, "{body}");
    }
}

/// The (field, reason) pairs of a 422's causes, after checking it is an invalid `kind`
/// of group meta.k8s.io as kube-apiserver reports bad request options.
fn option_causes(code: u16, status: &Value, kind: &str) -> Vec<(String, String)> {
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Invalid", "{status}");
    assert_eq!(status["details"]["group"], "meta.k8s.io", "{status}");
    assert_eq!(status["details"]["kind"], kind, "{status}");
    assert!(status["details"].get("name").is_none(), "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("{kind}.meta.k8s.io \"\" is invalid: ")),
        "{message}"
    );
    status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn list_and_watch_options_are_validated_like_kube_apiserver() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let collection = format!("{}/api/v1/namespaces/default/services", server.url());
    let forbidden = |field: &str| vec![(field.to_string(), "FieldValueForbidden".to_string())];
    // (query, the causes kube-apiserver's ValidateListOptions reports)
    let cases: Vec<(&str, Vec<(String, String)>)> = vec![
        (
            "resourceVersionMatch=NotOlderThan",
            forbidden("resourceVersionMatch"),
        ),
        (
            "resourceVersion=0&resourceVersionMatch=Exact",
            forbidden("resourceVersionMatch"),
        ),
        (
            "resourceVersion=1&resourceVersionMatch=Sometime",
            vec![(
                "resourceVersionMatch".to_string(),
                "FieldValueNotSupported".to_string(),
            )],
        ),
        ("sendInitialEvents=true", forbidden("sendInitialEvents")),
        // Watches: sendInitialEvents needs resourceVersionMatch=NotOlderThan, and
        // resourceVersionMatch needs sendInitialEvents.
        (
            "watch=true&sendInitialEvents=true",
            forbidden("resourceVersionMatch"),
        ),
        (
            "watch=true&resourceVersion=1&resourceVersionMatch=NotOlderThan",
            forbidden("resourceVersionMatch"),
        ),
    ];
    for (query, want) in cases {
        let (code, status) = get(&http, &format!("{collection}?{query}")).await;
        assert_eq!(option_causes(code, &status, "ListOptions"), want, "{query}");
    }
    // The valid forms are served.
    for query in [
        "resourceVersion=1&resourceVersionMatch=NotOlderThan",
        "resourceVersion=0&resourceVersionMatch=NotOlderThan",
        "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
    ] {
        let (code, body) = get(&http, &format!("{collection}?{query}")).await;
        assert_eq!(code, 200, "{query}: {body}");
    }
    // A malformed label selector, or one whose key or value is no label, is a 400.
    for selector in ["a%20in%20(b", "-a", "app%3D%3D%3Dweb", "app%3D-x"] {
        let (code, status) = get(&http, &format!("{collection}?labelSelector={selector}")).await;
        assert_eq!(
            (code, status["reason"].as_str()),
            (400, Some("BadRequest")),
            "{selector}: {status}"
        );
    }

    // Field selectors: only the labels kube-apiserver registers for the kind; others are a
    // 400 with the conversion function's message.
    let (code, list) = get(
        &http,
        &format!("{collection}?fieldSelector=spec.type%3DClusterIP"),
    )
    .await;
    assert_eq!(code, 200, "{list}");
    let (code, status) = get(&http, &format!("{collection}?fieldSelector=spec.ports%3Dx")).await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["message"], "field label not supported: spec.ports");
    let (code, status) = get(
        &http,
        &format!(
            "{}/api/v1/configmaps?fieldSelector=data.k%3Dv&watch=true",
            server.url()
        ),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "\"data.k\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );
    // A node that leaves spec.unschedulable out is schedulable (the field reads "false").
    server
        .seed(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}))
        .unwrap();
    let (code, nodes) = get(
        &http,
        &format!(
            "{}/api/v1/nodes?fieldSelector=spec.unschedulable%3Dfalse",
            server.url()
        ),
    )
    .await;
    assert_eq!(code, 200, "{nodes}");
    assert_eq!(nodes["items"].as_array().unwrap().len(), 1, "{nodes}");
}

#[tokio::test]
async fn streaming_list_ends_its_initial_events_with_an_annotated_bookmark() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let base = server.url();
    create_config_maps(&http, &base, &["a", "b"]).await;
    let collection = format!("{base}/api/v1/namespaces/default/configmaps");
    let (_, list) = get(&http, &collection).await;
    let list_rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // Watch-list: the current objects, then a bookmark at their version carrying the
    // k8s.io/initial-events-end annotation; timeoutSeconds ends the stream.
    let events = watch_events(
        &http,
        &format!(
            "{collection}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
             &allowWatchBookmarks=true&timeoutSeconds=1"
        ),
    )
    .await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(&kinds[..3], ["ADDED", "ADDED", "BOOKMARK"], "{events:?}");
    let end = &events[2]["object"];
    assert_eq!(end["kind"], "ConfigMap");
    assert_eq!(
        end["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(end["metadata"]["resourceVersion"], list_rv.as_str());

    // kube-apiserver sends that bookmark only to watchers that allowed bookmarks.
    let events = watch_events(
        &http,
        &format!(
            "{collection}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
             &timeoutSeconds=1"
        ),
    )
    .await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ADDED", "ADDED"]);

    // A legacy watch from resourceVersion "0" is defaulted to sendInitialEvents=true.
    let events = watch_events(
        &http,
        &format!(
            "{collection}?watch=true&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=1"
        ),
    )
    .await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(&kinds[..3], ["ADDED", "ADDED", "BOOKMARK"], "{events:?}");

    // sendInitialEvents=false without a resourceVersion starts from now: no initial objects.
    let events = watch_events(
        &http,
        &format!(
            "{collection}?watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan\
             &timeoutSeconds=1"
        ),
    )
    .await;
    assert!(events.is_empty(), "{events:?}");

    // A streaming list newer than anything stored is the 504 kube-apiserver gives a
    // too-large resourceVersion.
    let future: u64 = list_rv.parse::<u64>().unwrap() + 1000;
    let (code, status) = get(
        &http,
        &format!(
            "{collection}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
             &resourceVersion={future}"
        ),
    )
    .await;
    assert_eq!(code, 504, "{status}");
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
}

#[tokio::test]
async fn expired_continue_token_offers_an_inconsistent_continuation() {
    let server = ApiServer::builder().history(5).start().await.unwrap();
    let http = reqwest::Client::new();
    let base = server.url();
    create_config_maps(&http, &base, &["a", "b", "c", "d"]).await;
    let collection = format!("{base}/api/v1/namespaces/default/configmaps");
    let (_, page) = get(&http, &format!("{collection}?limit=2")).await;
    let names: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let token = page["metadata"]["continue"].as_str().unwrap().to_string();

    // A resourceVersion next to a continue token is refused (storage/etcd3 GetList).
    let (code, status) = get(
        &http,
        &format!("{collection}?limit=2&continue={token}&resourceVersion=3"),
    )
    .await;
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    // So is resourceVersionMatch (ValidateListOptions).
    let (code, status) = get(
        &http,
        &format!("{collection}?limit=2&continue={token}&resourceVersion=3&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    assert_eq!(code, 422, "{status}");

    // Push the page's version out of the history: the 410 carries a token that continues
    // after "b" from the newest state, where "c" is gone and "e" is new.
    create_config_maps(&http, &base, &["e", "f", "g", "h", "i", "j"]).await;
    let (code, _) = call(
        &http,
        reqwest::Method::DELETE,
        &format!("{collection}/c"),
        "",
        None,
    )
    .await;
    assert_eq!(code, 200);
    let (code, status) = get(&http, &format!("{collection}?limit=2&continue={token}")).await;
    assert_eq!(code, 410, "{status}");
    assert_eq!(status["reason"], "Expired");
    let inconsistent = status["metadata"]["continue"].as_str().unwrap();
    let (code, page) = get(
        &http,
        &format!("{collection}?limit=2&continue={inconsistent}"),
    )
    .await;
    assert_eq!(code, 200, "{page}");
    let names: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["d", "e"]);
    // The next page is consistent again: pinned to the version of this one.
    let next = page["metadata"]["continue"].as_str().unwrap();
    let (code, rest) = get(&http, &format!("{collection}?limit=10&continue={next}")).await;
    assert_eq!(code, 200, "{rest}");
    assert_eq!(
        rest["metadata"]["resourceVersion"],
        page["metadata"]["resourceVersion"]
    );
    assert_eq!(rest["items"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn write_options_are_validated_before_anything_is_written() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let base = server.url();
    create_config_maps(&http, &base, &["kept"]).await;
    let collection = format!("{base}/api/v1/namespaces/default/configmaps");
    let object = format!("{collection}/kept");
    let (_, before) = get(&http, &object).await;
    let cause = |field: &str, reason: &str| vec![(field.to_string(), reason.to_string())];
    let mut changed = before.clone();
    changed["data"]["k"] = json!("changed");
    // (method, URL, content type, body, options kind, the causes of kube-apiserver's 422)
    let cases = [
        // dryRun accepts only "All": anything else is refused, never taken as a real write.
        (
            reqwest::Method::POST,
            format!("{collection}?dryRun=true"),
            "application/json",
            Some(json!({"metadata": {"name": "fresh"}})),
            "CreateOptions",
            cause("dryRun", "FieldValueNotSupported"),
        ),
        (
            reqwest::Method::PUT,
            format!("{object}?dryRun=yes"),
            "application/json",
            Some(changed),
            "UpdateOptions",
            cause("dryRun", "FieldValueNotSupported"),
        ),
        // Apply needs a fieldManager; force is for apply only.
        (
            reqwest::Method::PATCH,
            object.clone(),
            "application/apply-patch+yaml",
            Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "applied"}})),
            "PatchOptions",
            cause("fieldManager", "FieldValueRequired"),
        ),
        (
            reqwest::Method::PATCH,
            format!("{object}?force=true"),
            "application/merge-patch+json",
            Some(json!({"data": {"k": "merged"}})),
            "PatchOptions",
            cause("force", "FieldValueForbidden"),
        ),
        // An unknown propagationPolicy, in the query or in DeleteOptions, deletes nothing.
        (
            reqwest::Method::DELETE,
            format!("{object}?propagationPolicy=Sideways"),
            "",
            None,
            "DeleteOptions",
            cause("propagationPolicy", "FieldValueNotSupported"),
        ),
        (
            reqwest::Method::DELETE,
            object.clone(),
            "application/json",
            Some(json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["Some"]})),
            "DeleteOptions",
            cause("dryRun", "FieldValueNotSupported"),
        ),
    ];
    for (method, url, content_type, body, options, expected) in cases {
        let (code, status) = call(&http, method.clone(), &url, content_type, body).await;
        assert_eq!(
            option_causes(code, &status, options),
            expected,
            "{method} {url}"
        );
    }
    // The refused create wrote nothing.
    let (code, _) = get(&http, &format!("{collection}/fresh")).await;
    assert_eq!(code, 404);

    // Nothing above changed the object or bumped its resourceVersion.
    let (code, after) = get(&http, &object).await;
    assert_eq!(code, 200);
    assert_eq!(after, before);
}

#[tokio::test]
async fn failed_writes_are_explained_like_kube_apiserver() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let base = server.url();
    let services = format!("{base}/api/v1/namespaces/default/services");
    let node_port = |name: &str| {
        json!({"metadata": {"name": name},
               "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}})
    };
    let (code, first) = post(&http, &services, node_port("first")).await;
    assert_eq!(code, 201, "{first}");

    // Go prints a number without quotes in a field error (field.Error.ErrorBody).
    let (code, status) = post(&http, &services, node_port("second")).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "Service \"second\" is invalid: spec.ports[0].nodePort: Invalid value: 30080: \
         provided port is already allocated"
    );
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "spec.ports[0].nodePort"
    );

    // ... and a list of strings as Go source.
    let (code, status) = merge_patch(
        &http,
        &format!("{services}/first"),
        json!({"spec": {"clusterIP": "10.96.0.250", "clusterIPs": ["10.96.0.250"]}}),
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["details"]["causes"][0]["message"],
        "Invalid value: []string{\"10.96.0.250\"}: may not change once set"
    );

    // A kind outside the core group is named with its group.
    let (code, status) = post(
        &http,
        &format!("{base}/apis/coordination.k8s.io/v1/namespaces/default/leases"),
        json!({"metadata": {"name": "Not_A_Name"}}),
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("Lease.coordination.k8s.io \"Not_A_Name\" is invalid: "),
        "{status}"
    );

    // A stale resourceVersion precondition on delete: 409 naming the kind and both versions.
    let rv = first["metadata"]["resourceVersion"].as_str().unwrap();
    let (code, status) = call(
        &http,
        reqwest::Method::DELETE,
        &format!("{services}/first"),
        "application/json",
        Some(json!({"preconditions": {"resourceVersion": "1"}})),
    )
    .await;
    assert_eq!(code, 409, "{status}");
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(
        status["message"],
        format!(
            "Operation cannot be fulfilled on Service \"first\": the ResourceVersion in the \
             precondition (1) does not match the ResourceVersion in record ({rv}). The object \
             might have been modified"
        )
    );
    // The right one deletes.
    let (code, status) = call(
        &http,
        reqwest::Method::DELETE,
        &format!("{services}/first"),
        "application/json",
        Some(json!({"preconditions": {"resourceVersion": rv}})),
    )
    .await;
    assert_eq!(code, 200, "{status}");
}

/// A PUT of a missing object creates it where the registry strategy allows create on update
/// (Services, Endpoints, Leases) and is a 404 elsewhere (ConfigMaps).
#[tokio::test]
async fn put_creates_only_where_kube_apiserver_allows_it() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let base = server.url();
    let (code, created) = put(
        &http,
        &format!("{base}/api/v1/namespaces/default/services/fresh"),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "fresh"},
               "spec": {"ports": [{"port": 80}]}}),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert!(created["spec"]["clusterIP"].is_string(), "{created}");
    let (code, lease) = put(
        &http,
        &format!("{base}/apis/coordination.k8s.io/v1/namespaces/default/leases/lock"),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "lock"}, "spec": {"holderIdentity": "a"}}),
    )
    .await;
    assert_eq!(code, 201, "{lease}");
    let (code, status) = put(
        &http,
        &format!("{base}/api/v1/namespaces/default/services/other"),
        json!({"metadata": {"name": "fresh-2"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (400, Some("BadRequest")),
        "{status}"
    );
    let (code, status) = put(
        &http,
        &format!("{base}/api/v1/namespaces/default/configmaps/missing"),
        json!({"metadata": {"name": "missing"}, "data": {"k": "v"}}),
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (404, Some("NotFound")),
        "{status}"
    );
}

/// Server-side apply: the configuration must name the served apiVersion and carry no
/// managedFields (400, structuredmerge.go), and a forced apply that takes every field of
/// another manager drops that manager's now-empty entry.
#[tokio::test]
async fn apply_checks_its_configuration_and_drops_emptied_managers() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let object = format!(
        "{}/api/v1/namespaces/default/configmaps/applied",
        server.url()
    );
    let apply = |manager: &str, force: bool, body: Value| {
        let http = http.clone();
        let url = format!("{object}?fieldManager={manager}&force={force}");
        let url = if force {
            url
        } else {
            url.replace("&force=false", "")
        };
        async move {
            call(
                &http,
                reqwest::Method::PATCH,
                &url,
                "application/apply-patch+yaml",
                Some(body),
            )
            .await
        }
    };
    let config = |value: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"},
               "data": {"k": value}})
    };
    let (code, status) = apply(
        "a",
        false,
        json!({"kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"k": "1"}}),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "Incorrect version specified in apply patch. Specified patch version: , expected: v1"
    );
    let mut with_managed = config("1");
    with_managed["metadata"]["managedFields"] = json!([{"manager": "x"}]);
    let (code, status) = apply("a", false, with_managed).await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["message"], "metadata.managedFields must be nil");

    let (code, body) = apply("a", false, config("1")).await;
    assert_eq!(code, 201, "{body}");
    let (code, status) = apply("b", false, config("2")).await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (409, Some("Conflict")),
        "{status}"
    );
    let (code, taken) = apply("b", true, config("2")).await;
    assert_eq!(code, 200, "{taken}");
    let managers: Vec<&str> = taken["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["b"], "{taken}");
}

/// `ValidateLoadBalancerStatus`: ingress IPs must be IPs and hostnames DNS names, never IPs.
#[tokio::test]
async fn load_balancer_status_addresses_are_validated() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let services = format!("{}/api/v1/namespaces/default/services", server.url());
    let (code, body) = post(
        &http,
        &services,
        json!({"metadata": {"name": "lb"},
               "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let status_url = format!("{services}/lb/status");
    let status = |ingress: Value| {
        merge_patch(
            &http,
            &status_url,
            json!({"status": {"loadBalancer": {"ingress": ingress}}}),
        )
    };
    let (code, refused) = status(json!([{"ip": "not-an-ip"}])).await;
    assert_eq!(code, 422, "{refused}");
    assert_eq!(
        refused["details"]["causes"][0]["field"],
        "status.loadBalancer.ingress[0].ip"
    );
    let (code, refused) = status(json!([{"hostname": "192.0.2.7"}])).await;
    assert_eq!(code, 422, "{refused}");
    assert_eq!(
        refused["details"]["causes"][0]["message"],
        "Invalid value: \"192.0.2.7\": must be a DNS name, not an IP address"
    );
    let (code, accepted) =
        status(json!([{"ip": "192.0.2.7"}, {"hostname": "lb.example.com"}])).await;
    assert_eq!(code, 200, "{accepted}");

    // Turning the LoadBalancer into a ClusterIP Service wipes its ingress points.
    let (code, changed) = merge_patch(
        &http,
        &format!("{services}/lb"),
        json!({"spec": {"type": "ClusterIP"}}),
    )
    .await;
    assert_eq!(code, 200, "{changed}");
    assert_eq!(changed["status"]["loadBalancer"], json!({}));
}

/// kube-apiserver 1.33 (`AllowServiceLBStatusOnNonLB` locked off): ingress points only on a
/// `type: LoadBalancer` Service. A `/status` write that puts them on any other type is one
/// Forbidden cause at `status.loadBalancer.ingress` (`ValidateLoadBalancerStatus`), whatever
/// the stored status already held; an empty list is fine; the main resource never takes
/// status and clears ingress points whenever the type is not LoadBalancer
/// (`dropTypeDependentFields`); a `/status` write cannot change the type it is judged by.
#[tokio::test]
async fn load_balancer_status_only_on_load_balancers() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let services = format!("{}/api/v1/namespaces/default/services", server.url());
    let ingress = |ip: &str| json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}});
    let forbidden = "Forbidden: may only be used when `spec.type` is 'LoadBalancer'";
    let assert_forbidden = |code: u16, body: &Value, name: &str| {
        assert_eq!(code, 422, "{body}");
        assert_eq!(body["reason"], "Invalid", "{body}");
        assert_eq!(
            body["message"],
            format!("Service \"{name}\" is invalid: status.loadBalancer.ingress: {forbidden}")
        );
        assert_eq!(
            body["details"]["causes"],
            json!([{"reason": "FieldValueForbidden", "message": forbidden,
                    "field": "status.loadBalancer.ingress"}]),
            "one cause, the entries are not checked further"
        );
    };
    for (name, type_) in [("internal", "ClusterIP"), ("ports", "NodePort")] {
        let (code, body) = post(
            &http,
            &services,
            json!({"metadata": {"name": name},
                   "spec": {"type": type_, "ports": [{"port": 80}]}}),
        )
        .await;
        assert_eq!(code, 201, "{body}");
        let status_url = format!("{services}/{name}/status");
        let (code, body) = merge_patch(&http, &status_url, ingress("192.0.2.1")).await;
        assert_forbidden(code, &body, name);
        // An entry that is invalid as well still gets only the Forbidden cause.
        let (code, body) = merge_patch(&http, &status_url, ingress("not-an-ip")).await;
        assert_forbidden(code, &body, name);
        // A PUT of the whole object to /status is judged the same way.
        let (_, mut current) = get(&http, &format!("{services}/{name}")).await;
        current["status"] = ingress("192.0.2.1")["status"].clone();
        let (code, body) = put(&http, &status_url, current).await;
        assert_forbidden(code, &body, name);
        // The body cannot make itself a LoadBalancer: /status keeps the stored spec.
        let mut retyped = ingress("192.0.2.1");
        retyped["spec"] = json!({"type": "LoadBalancer"});
        let (code, body) = merge_patch(&http, &status_url, retyped).await;
        assert_forbidden(code, &body, name);
        // No ingress points, or an empty list, is fine.
        let (code, body) = merge_patch(
            &http,
            &status_url,
            json!({"status": {"loadBalancer": {"ingress": []}}}),
        )
        .await;
        assert_eq!(code, 200, "{body}");
    }

    // A LoadBalancer takes them; once it is retyped, its ingress points are gone and cannot
    // come back through /status.
    let (code, body) = post(
        &http,
        &services,
        json!({"metadata": {"name": "lb"},
               "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = merge_patch(
        &http,
        &format!("{services}/lb/status"),
        ingress("192.0.2.7"),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body["status"]["loadBalancer"]["ingress"],
        json!([{"ip": "192.0.2.7", "ipMode": "VIP"}])
    );
    // A status write naming another type changes neither the type nor the verdict.
    let mut retyped = ingress("192.0.2.8");
    retyped["spec"] = json!({"type": "ClusterIP"});
    let (code, body) = merge_patch(&http, &format!("{services}/lb/status"), retyped).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["spec"]["type"], "LoadBalancer");
    let (code, body) = merge_patch(
        &http,
        &format!("{services}/lb"),
        json!({"spec": {"type": "NodePort"}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"]["loadBalancer"], json!({}));
    let (code, body) = merge_patch(
        &http,
        &format!("{services}/lb/status"),
        ingress("192.0.2.7"),
    )
    .await;
    assert_forbidden(code, &body, "lb");

    // State loaded as given (`kube-lb plan -f`, `kube-lb apiserver -f`): a ClusterIP Service
    // that kept its ingress points from before kube 1.29 is stored as it is...
    let seeded = server
        .seed(json!({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": "kept", "namespace": "default"},
                     "spec": {"ports": [{"port": 80}]},
                     "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.9"}]}}}))
        .unwrap();
    assert_eq!(
        seeded["status"]["loadBalancer"]["ingress"][0]["ip"],
        "192.0.2.9"
    );
    // ...but no client write of its status passes while the ingress points stay (no
    // ratcheting upstream either)...
    let (code, body) = merge_patch(
        &http,
        &format!("{services}/kept/status"),
        json!({"status": {"conditions": []}}),
    )
    .await;
    assert_forbidden(code, &body, "kept");
    // ...and the next write of its main resource clears them.
    let (code, body) = merge_patch(
        &http,
        &format!("{services}/kept"),
        json!({"metadata": {"labels": {"touched": "yes"}}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"]["loadBalancer"], json!({}));
    server.shutdown().await;
}

/// Field selectors on Events, as kube-apiserver's `AddFieldLabelConversionsForEvent` of
/// core/v1 and of events.k8s.io/v1 accept them (each API its own spellings), read as
/// `EventToSelectableFields` computes them: `source` is the source component, else the
/// reporting controller. Other labels are a 400 naming the label, for lists and watches.
#[tokio::test]
async fn event_field_selectors_are_restricted_per_api() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let core = format!("{}/api/v1/namespaces/default/events", server.url());
    let v1 = format!(
        "{}/apis/events.k8s.io/v1/namespaces/default/events",
        server.url()
    );
    for (url, event) in [
        (
            &core,
            json!({"metadata": {"name": "by-kubelet"},
                   "involvedObject": {"kind": "Pod", "name": "web-1", "namespace": "default"},
                   "reason": "Pulled", "type": "Normal", "message": "pulled",
                   "source": {"component": "kubelet"}}),
        ),
        (
            &core,
            json!({"metadata": {"name": "reported"},
                   "involvedObject": {"kind": "Node", "name": "n1"},
                   "reason": "Rebooted", "type": "Warning", "message": "rebooted",
                   "reportingComponent": "kube-proxy", "reportingInstance": "n1"}),
        ),
        (
            &v1,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                   "metadata": {"name": "by-kube-lb"},
                   "eventTime": "2026-01-01T00:00:00.000000Z",
                   "regarding": {"kind": "Service", "name": "web", "namespace": "default"},
                   "reason": "EnsuredLoadBalancer", "type": "Normal", "action": "Ensure",
                   "note": "ensured", "reportingController": "kube-lb",
                   "reportingInstance": "kube-lb-0"}),
        ),
    ] {
        let (code, body) = call(
            &http,
            reqwest::Method::POST,
            url,
            "application/json",
            Some(event),
        )
        .await;
        assert_eq!(code, 201, "{body}");
    }
    let names = |list: &Value| -> Vec<String> {
        let mut names: Vec<String> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    for (url, selector, expected) in [
        // The events.k8s.io/v1 Event is a core/v1 Event too.
        (&core, "involvedObject.kind=Service", vec!["by-kube-lb"]),
        (
            &core,
            "involvedObject.name=web-1,type=Normal",
            vec!["by-kubelet"],
        ),
        (&core, "reason=EnsuredLoadBalancer", vec!["by-kube-lb"]),
        (&core, "reportingComponent=kube-lb", vec!["by-kube-lb"]),
        (&core, "source=kubelet", vec!["by-kubelet"]),
        // No source component: the reporting controller stands in.
        (&core, "source=kube-proxy", vec!["reported"]),
        (
            &core,
            "metadata.namespace=default,type!=Warning",
            vec!["by-kube-lb", "by-kubelet"],
        ),
        (
            &v1,
            "regarding.kind=Service,regarding.name=web",
            vec!["by-kube-lb"],
        ),
        // ...and the core/v1 Events are events.k8s.io/v1 Events.
        (&v1, "regarding.kind=Pod", vec!["by-kubelet"]),
        (&v1, "regarding.kind=Node,type=Warning", vec!["reported"]),
        // The deprecated source's component first.
        (&v1, "source=kubelet", vec!["by-kubelet"]),
        (&v1, "reportingController=kube-lb", vec!["by-kube-lb"]),
        // No deprecated source: the reporting controller stands in.
        (&v1, "source=kube-lb", vec!["by-kube-lb"]),
        (
            &v1,
            "metadata.name=by-kube-lb,reason=EnsuredLoadBalancer",
            vec!["by-kube-lb"],
        ),
    ] {
        let (code, body) = get(&http, &format!("{url}?fieldSelector={selector}")).await;
        assert_eq!(code, 200, "{url}?{selector}: {body}");
        assert_eq!(names(&body), expected, "{url}?{selector}");
    }
    for (url, label) in [
        (&core, "message"),
        (&core, "regarding.name"),
        (&core, "reportingController"),
        (&v1, "note"),
        (&v1, "involvedObject.name"),
        (&v1, "reportingComponent"),
    ] {
        for watch in ["", "watch=true&"] {
            let (code, body) = get(&http, &format!("{url}?{watch}fieldSelector={label}=x")).await;
            assert_eq!(code, 400, "{url} {watch}{label}: {body}");
            assert_eq!(body["reason"], "BadRequest", "{body}");
            assert_eq!(
                body["message"],
                format!("field label not supported: {label}")
            );
        }
    }
    server.shutdown().await;
}
