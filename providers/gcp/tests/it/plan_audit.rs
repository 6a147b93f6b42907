//! `kube-lb plan` and `kube-lb audit` for GCP, against the in-memory GCE mock: the plan makes
//! no mutating call (the provider's call counter and the mock's journal and state agree), is
//! empty once in sync, and names the fields that change; `owned_resources` lists exactly what
//! the provider made, by Service, and `delete` of the recorded Service removes it; a refused
//! read is an error, never a shorter answer. The migration check builds a load balancer the
//! way upstream cloud-provider-gcp names and marks it and shows what adopting it changes.

// Test helpers outside #[test] functions: a failed setup step should panic with its error.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::{BTreeMap, BTreeSet};

use kube_lb_annotations::{Cloud, LoadBalancerSpec};
use kube_lb_mock_gce::{ApiError, Fault, FaultResponse, MockGce};
use kube_lb_provider_core::naming::load_balancer_name;
use kube_lb_provider_core::{
    BackendNode, LoadBalancerProvider, OwnedResource, PlannedChange, ProviderError,
};
use kube_lb_provider_gcp::GcpProvider;
use serde_json::{Value, json};
use support::{
    OWNED_COLLECTIONS, TAG, ZONE_A, ZONE_B, fast_options, node, provider_with, three_node_builder,
    two_nodes,
};

const UID_WEB: &str = "4b2a6798-feb5-11e6-bdea-42010af00000";
const UID_API: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";
const UID_SHOP: &str = "0c1d2e3f-4a5b-11ea-8c9d-0e1f2a3b4c5d";
const HEALTH_RANGES: [&str; 4] = [
    "130.211.0.0/22",
    "209.85.152.0/22",
    "209.85.204.0/22",
    "35.191.0.0/16",
];

/// The three-node mock.
async fn mock() -> MockGce {
    three_node_builder().start().await.unwrap()
}

/// A provider as a controller or a `kube-lb plan` run builds it: nothing cached, cluster `c1`,
/// three attempts per call.
async fn provider(gce: &MockGce) -> GcpProvider {
    let mut options = fast_options();
    options.retry.max_attempts = 3;
    provider_with(gce, options).await
}

/// A Service manifest parsed by the real annotation parser.
fn service(name: &str, uid: &str, edit: impl FnOnce(&mut Value)) -> LoadBalancerSpec {
    let mut manifest = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "annotations": {}},
        "spec": {
            "type": "LoadBalancer",
            "externalTrafficPolicy": "Cluster",
            "ports": [
                {"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"},
                {"name": "https", "port": 443, "nodePort": 30443, "protocol": "TCP"},
            ],
        },
    });
    edit(&mut manifest);
    let service: k8s_openapi::api::core::v1::Service = serde_json::from_value(manifest).unwrap();
    kube_lb_annotations::parse(Cloud::Gcp, &service)
        .unwrap()
        .spec
}

fn web() -> LoadBalancerSpec {
    service("web", UID_WEB, |_| {})
}

fn api() -> LoadBalancerSpec {
    service("api", UID_API, |_| {})
}

fn nodes() -> Vec<BackendNode> {
    two_nodes()
}

/// Everything the mock holds in the collections the provider writes to.
fn state(gce: &MockGce) -> Vec<Value> {
    OWNED_COLLECTIONS
        .iter()
        .flat_map(|c| gce.resources(c))
        .collect()
}

/// Runs `plan` and asserts it mutated nothing: the provider counted no mutating call, the
/// mock's journal has none, and its state is unchanged.
async fn without_mutations<T>(
    gce: &MockGce,
    provider: &GcpProvider,
    plan: impl std::future::Future<Output = T>,
) -> T {
    let mark = gce.journal_len();
    let calls = provider.calls().snapshot();
    let before = state(gce);
    let out = plan.await;
    let mutations: Vec<String> = gce
        .mutations_since(mark)
        .iter()
        .map(|e| e.short())
        .collect();
    assert_eq!(mutations, Vec::<String>::new(), "the plan mutated");
    assert_eq!(provider.calls().snapshot().since(&calls).mutations(), 0);
    assert_eq!(state(gce), before, "the plan changed the cloud");
    out
}

/// Asserts that `provider` plans no change for `spec` over [`nodes`] (and, through
/// [`without_mutations`], that planning mutated nothing).
async fn assert_plans_nothing(
    gce: &MockGce,
    provider: &GcpProvider,
    spec: &LoadBalancerSpec,
    why: &str,
) {
    let plan = without_mutations(gce, provider, provider.plan_ensure(spec, &nodes()))
        .await
        .unwrap();
    assert_eq!(plan, vec![], "{why}");
}

/// POSTs `body` to `url` (a collection of the mock's Compute API) as another client would,
/// and asserts the mock accepted it.
async fn post_accepted(http: &reqwest::Client, url: String, body: Value) {
    let answer = http.post(url).json(&body).send().await.unwrap();
    let status = answer.status();
    let text = answer.text().await.unwrap();
    assert!(status.is_success(), "{body}: {text}");
}

/// `action kind name` of each change, for compact assertions.
fn summary(plan: &[PlannedChange]) -> Vec<String> {
    plan.iter()
        .map(|c| format!("{} {} {}", c.action, c.kind, c.name))
        .collect()
}

/// The change to `kind name` by `call`.
fn find<'a>(plan: &'a [PlannedChange], call: &str, name: &str) -> &'a PlannedChange {
    plan.iter()
        .find(|c| c.call == call && c.name == name)
        .unwrap_or_else(|| panic!("no {call} of {name} in {:#?}", plan))
}

/// `field: old -> new` of a change.
fn fields(change: &PlannedChange) -> BTreeMap<String, (Option<String>, Option<String>)> {
    change
        .fields
        .iter()
        .map(|f| (f.field.clone(), (f.old.clone(), f.new.clone())))
        .collect()
}

fn some(text: &str) -> Option<String> {
    Some(text.to_string())
}

#[tokio::test]
async fn plan_of_a_new_service_lists_every_create_and_is_empty_once_in_sync() {
    let gce = mock().await;
    let provider = provider(&gce).await;
    let lb = load_balancer_name(UID_WEB);

    let plan = without_mutations(&gce, &provider, provider.plan_ensure(&web(), &nodes()))
        .await
        .unwrap();
    assert_eq!(
        summary(&plan),
        [
            format!("create Address {lb}"),
            format!("create Firewall k8s-fw-{lb}"),
            "create Firewall k8s-c1-node-http-hc".to_string(),
            "create HttpHealthCheck k8s-c1-node".to_string(),
            format!("create TargetPool {lb}"),
            format!("create ForwardingRule {lb}"),
        ]
    );
    // GCE chooses the IP: the address is phase 1, everything that uses the IP waits for it.
    let phases: Vec<(u32, Option<&str>)> = plan
        .iter()
        .map(|c| (c.phase, c.depends_on.as_deref()))
        .collect();
    let waits = Some(kube_lb_provider_gcp::flow::WAITS_FOR_ADDRESS);
    assert_eq!(phases[0], (1, None), "{phases:?}");
    assert!(phases[1..].iter().all(|p| *p == (2, waits)), "{phases:?}");
    let rule = fields(find(&plan, "forwardingRules.insert", &lb));
    assert_eq!(rule["portRange"], (None, some("80-443")));
    assert_eq!(rule["IPAddress"], (None, some("(allocated by GCE)")));
    assert_eq!(rule["networkTier"], (None, some("PREMIUM")));
    let firewall = fields(find(&plan, "firewalls.insert", &format!("k8s-fw-{lb}")));
    assert_eq!(firewall["allowed"], (None, some("tcp:80,443")));
    assert_eq!(firewall["sourceRanges"], (None, some("0.0.0.0/0")));
    assert_eq!(
        firewall["destinationRanges"],
        (None, some("(allocated by GCE)"))
    );
    let pool = fields(find(&plan, "targetPools.insert", &lb));
    assert_eq!(
        pool["instances"],
        (None, some("gke-c1-node-1, gke-c1-node-2"))
    );
    let check = fields(find(&plan, "httpHealthChecks.insert", "k8s-c1-node"));
    assert_eq!(check["port"], (None, some("10256")));

    // The ensure makes exactly the planned calls (and waits for their operations).
    let mark = gce.journal_len();
    provider.ensure(&web(), &nodes()).await.unwrap();
    let made: Vec<String> = gce
        .mutations_since(mark)
        .iter()
        .map(|e| e.short())
        .filter(|call| !call.contains("/operations/"))
        .collect();
    assert_eq!(made.len(), plan.len(), "{made:?}");

    assert_plans_nothing(&gce, &provider, &web(), "in sync").await;
    // Also from a fresh provider (nothing cached), as `kube-lb plan` runs.
    let fresh = self::provider(&gce).await;
    assert_plans_nothing(&gce, &fresh, &web(), "in sync, fresh provider").await;
}

/// After a start, `ensure` first removes a shared node health check the cluster left unused
/// (an interrupted change), and then builds it again for a Service that needs it: the plan
/// says so, call for call.
#[tokio::test]
async fn plan_after_a_start_includes_the_removal_of_unused_shared_pieces() {
    let gce = mock().await;
    let http = reqwest::Client::new();
    let base = format!("{}/compute/v1/projects/{}", gce.url(), gce.project());
    post_accepted(
        &http,
        format!("{base}/global/httpHealthChecks"),
        json!({"name": "k8s-c1-node", "port": 10256, "requestPath": "/healthz",
            "description": json!({"kubernetes.io/cluster-id": "c1"}).to_string()}),
    )
    .await;
    let provider = provider(&gce).await;
    let lb = load_balancer_name(UID_WEB);
    let plan = without_mutations(&gce, &provider, provider.plan_ensure(&web(), &nodes()))
        .await
        .unwrap();
    assert_eq!(
        summary(&plan),
        [
            "delete HttpHealthCheck k8s-c1-node".to_string(),
            format!("create Address {lb}"),
            format!("create Firewall k8s-fw-{lb}"),
            "create Firewall k8s-c1-node-http-hc".to_string(),
            "create HttpHealthCheck k8s-c1-node".to_string(),
            format!("create TargetPool {lb}"),
            format!("create ForwardingRule {lb}"),
        ]
    );
    // Every planned change is made and nothing else: the health check's firewall, which
    // never existed, is read and not sent a DELETE that could only answer 404.
    let mark = gce.journal_len();
    provider.ensure(&web(), &nodes()).await.unwrap();
    let made = gce.mutations_since(mark);
    assert!(made.iter().all(|e| e.status == 200), "{made:?}");
    assert_eq!(made.len(), plan.len(), "{made:?}");
}

#[tokio::test]
async fn plan_of_a_changed_service_shows_old_and_new_values() {
    let gce = mock().await;
    let provider = provider(&gce).await;
    let lb = load_balancer_name(UID_WEB);
    let status = provider.ensure(&web(), &nodes()).await.unwrap();
    let ip = status.ingress[0].ip.unwrap().to_string();

    // (what changed, the Service, the nodes, expected calls, expected field changes of one)
    type FieldWant = (&'static str, Option<String>, Option<String>);
    type OneChange = (&'static str, String, Vec<FieldWant>);
    type Case = (
        &'static str,
        LoadBalancerSpec,
        Vec<BackendNode>,
        Vec<String>,
        OneChange,
    );
    let cases: Vec<Case> = vec![
        (
            "source ranges",
            service("web", UID_WEB, |m| {
                m["spec"]["loadBalancerSourceRanges"] = json!(["192.0.2.0/24"]);
            }),
            nodes(),
            vec![format!("modify Firewall k8s-fw-{lb}")],
            (
                "firewalls.update",
                format!("k8s-fw-{lb}"),
                vec![("sourceRanges", some("0.0.0.0/0"), some("192.0.2.0/24"))],
            ),
        ),
        (
            "a node joins",
            web(),
            vec![
                node(ZONE_A, "gke-c1-node-1"),
                node(ZONE_B, "gke-c1-node-2"),
                node(ZONE_A, "gke-c1-node-3"),
            ],
            vec![format!("modify TargetPool {lb}")],
            (
                "targetPools.addInstance",
                lb.clone(),
                vec![(
                    "instances",
                    some("gke-c1-node-1, gke-c1-node-2"),
                    some("gke-c1-node-1, gke-c1-node-2, gke-c1-node-3"),
                )],
            ),
        ),
        (
            "a port is added: the rule is re-created on the same IP",
            service("web", UID_WEB, |m| {
                if let Some(ports) = m["spec"]["ports"].as_array_mut() {
                    ports.push(
                        json!({"name": "alt", "port": 8080, "nodePort": 30880, "protocol": "TCP"}),
                    );
                }
            }),
            nodes(),
            vec![
                format!("delete ForwardingRule {lb}"),
                format!("modify Firewall k8s-fw-{lb}"),
                format!("create ForwardingRule {lb}"),
            ],
            (
                "forwardingRules.insert",
                lb.clone(),
                vec![("portRange", some("80-443"), some("80-8080"))],
            ),
        ),
        (
            "Local traffic: a per-Service health check replaces the shared one",
            service("web", UID_WEB, |m| {
                m["spec"]["externalTrafficPolicy"] = json!("Local");
                m["spec"]["healthCheckNodePort"] = json!(31000);
            }),
            nodes(),
            vec![
                format!("create Firewall k8s-{lb}-http-hc"),
                format!("create HttpHealthCheck {lb}"),
                format!("modify TargetPool {lb}"),
                format!("modify TargetPool {lb}"),
                "delete HttpHealthCheck k8s-c1-node".to_string(),
                "delete Firewall k8s-c1-node-http-hc".to_string(),
            ],
            (
                "targetPools.addHealthCheck",
                lb.clone(),
                vec![("healthChecks", None, some(&lb))],
            ),
        ),
        (
            "Standard tier: a new address and rule",
            service("web", UID_WEB, |m| {
                m["metadata"]["annotations"]["cloud.google.com/network-tier"] = json!("Standard");
            }),
            nodes(),
            vec![
                format!("delete Address {lb}"),
                format!("create Address {lb}"),
                format!("delete ForwardingRule {lb}"),
                format!("modify Firewall k8s-fw-{lb}"),
                format!("create ForwardingRule {lb}"),
            ],
            (
                "addresses.insert",
                lb.clone(),
                vec![
                    ("address", some(&ip), some("(allocated by GCE)")),
                    ("networkTier", some("PREMIUM"), some("STANDARD")),
                ],
            ),
        ),
    ];
    for (what, spec, backends, calls, (call, name, want)) in cases {
        let plan = without_mutations(&gce, &provider, provider.plan_ensure(&spec, &backends))
            .await
            .unwrap();
        assert_eq!(summary(&plan), calls, "{what}");
        let got = fields(find(&plan, call, &name));
        for (field, old, new) in want {
            assert_eq!(
                got.get(field),
                Some(&(old, new)),
                "{what}: {field} in {got:?}"
            );
        }
    }
}

#[tokio::test]
async fn plan_of_an_internal_service_covers_groups_and_backend_service() {
    let gce = mock().await;
    let provider = provider(&gce).await;
    let lb = load_balancer_name(UID_WEB);
    let internal = service("web", UID_WEB, |m| {
        m["metadata"]["annotations"]["networking.gke.io/load-balancer-type"] = json!("Internal");
    });
    let plan = without_mutations(&gce, &provider, provider.plan_ensure(&internal, &nodes()))
        .await
        .unwrap();
    assert_eq!(
        summary(&plan),
        [
            format!("create Address {lb}"),
            format!("create Firewall k8s-fw-{lb}"),
            "create Firewall k8s-c1-node-hc".to_string(),
            "create HealthCheck k8s-c1-node".to_string(),
            format!("create InstanceGroup {ZONE_A}/k8s-ig--c1"),
            format!("modify InstanceGroup {ZONE_A}/k8s-ig--c1"),
            format!("create InstanceGroup {ZONE_B}/k8s-ig--c1"),
            format!("modify InstanceGroup {ZONE_B}/k8s-ig--c1"),
            format!("create BackendService {lb}"),
            format!("create ForwardingRule {lb}"),
        ]
    );
    let backends = fields(find(&plan, "regionBackendServices.insert", &lb));
    assert_eq!(
        backends["backends"],
        (
            None,
            some(&format!("{ZONE_A}/k8s-ig--c1, {ZONE_B}/k8s-ig--c1"))
        )
    );
    provider.ensure(&internal, &nodes()).await.unwrap();
    assert_plans_nothing(&gce, &provider, &internal, "in sync").await;
}

#[tokio::test]
async fn plan_delete_lists_what_delete_removes_and_spares_shared_pieces_in_use() {
    let gce = mock().await;
    let provider = provider(&gce).await;
    provider.ensure(&web(), &nodes()).await.unwrap();
    provider.ensure(&api(), &nodes()).await.unwrap();
    let (web_lb, api_lb) = (load_balancer_name(UID_WEB), load_balancer_name(UID_API));

    // (Service, what its delete removes: the shared check stays while the other uses it)
    let cases = [
        (
            web().service,
            vec![
                format!("delete ForwardingRule {web_lb}"),
                format!("delete Address {web_lb}"),
                format!("delete TargetPool {web_lb}"),
                format!("delete Firewall k8s-fw-{web_lb}"),
            ],
        ),
        (
            api().service,
            vec![
                format!("delete ForwardingRule {api_lb}"),
                format!("delete Address {api_lb}"),
                format!("delete TargetPool {api_lb}"),
                format!("delete Firewall k8s-fw-{api_lb}"),
                "delete HttpHealthCheck k8s-c1-node".to_string(),
                "delete Firewall k8s-c1-node-http-hc".to_string(),
            ],
        ),
    ];
    for (service, want) in cases {
        let plan = without_mutations(&gce, &provider, provider.plan_delete(&service))
            .await
            .unwrap();
        assert_eq!(summary(&plan), want, "{service}");
        let before: BTreeSet<(String, String)> = names(&gce);
        provider.delete(&service).await.unwrap();
        let removed: BTreeSet<String> = before
            .difference(&names(&gce))
            .map(|(_, name)| name.clone())
            .collect();
        let planned: BTreeSet<String> = plan.iter().map(|c| c.name.clone()).collect();
        assert_eq!(
            removed, planned,
            "{service}: delete removed what was planned"
        );
        let plan = without_mutations(&gce, &provider, provider.plan_delete(&service))
            .await
            .unwrap();
        assert_eq!(plan, vec![], "{service}: nothing left to delete");
    }
}

/// (collection, name) of everything in the mock.
fn names(gce: &MockGce) -> BTreeSet<(String, String)> {
    OWNED_COLLECTIONS
        .iter()
        .flat_map(|c| gce.names(c).into_iter().map(move |n| (c.to_string(), n)))
        .collect()
}

/// (kind, name) → `namespace/name`, or `shared` for shared pieces.
fn by_service(owned: &[OwnedResource]) -> BTreeMap<(String, String), String> {
    owned
        .iter()
        .map(|r| {
            let who = if r.shared {
                "shared".to_string()
            } else {
                assert_eq!(
                    load_balancer_name(&r.service.uid),
                    r.name
                        .trim_start_matches("k8s-fw-")
                        .trim_start_matches("k8s-")
                        .trim_end_matches("-http-hc"),
                    "{r:?}: the recorded UID names the resource"
                );
                format!("{}/{}", r.service.namespace, r.service.name)
            };
            ((r.kind.clone(), r.name.clone()), who)
        })
        .collect()
}

fn external_resources(lb: &str, service: &str) -> Vec<((String, String), String)> {
    [
        ("Address", lb.to_string()),
        ("Firewall", format!("k8s-fw-{lb}")),
        ("ForwardingRule", lb.to_string()),
        ("TargetPool", lb.to_string()),
    ]
    .into_iter()
    .map(|(kind, name)| ((kind.to_string(), name), service.to_string()))
    .collect()
}

fn shared_node_check() -> Vec<((String, String), String)> {
    vec![
        (
            ("Firewall".to_string(), "k8s-c1-node-http-hc".to_string()),
            "shared".to_string(),
        ),
        (
            ("HttpHealthCheck".to_string(), "k8s-c1-node".to_string()),
            "shared".to_string(),
        ),
    ]
}

/// The audit's orphan: a Service deleted while the controller was stopped (its finalizer
/// removed by hand) leaves its load balancer; `owned_resources` names it with its Service,
/// and a fresh provider's `delete` of that Service removes exactly it.
#[tokio::test]
async fn owned_resources_name_each_services_resources_and_delete_removes_an_orphan() {
    let gce = mock().await;
    let controller = provider(&gce).await;
    controller.ensure(&web(), &nodes()).await.unwrap();
    controller.ensure(&api(), &nodes()).await.unwrap();
    let (web_lb, api_lb) = (load_balancer_name(UID_WEB), load_balancer_name(UID_API));

    let audit = provider(&gce).await;
    let owned = without_mutations(&gce, &audit, audit.owned_resources())
        .await
        .unwrap();
    let mut want: BTreeMap<(String, String), String> = BTreeMap::new();
    want.extend(external_resources(&web_lb, "default/web"));
    want.extend(external_resources(&api_lb, "default/api"));
    want.extend(shared_node_check());
    assert_eq!(by_service(&owned), want);
    assert!(owned.iter().all(|r| r.created.is_some()), "{owned:#?}");
    // Everything the provider made is listed.
    assert_eq!(
        names(&gce).len(),
        owned.len(),
        "{:?} vs {owned:#?}",
        names(&gce)
    );

    // `web` is the orphan: delete what the listing recorded for it.
    let orphan = owned
        .iter()
        .find(|r| r.kind == "ForwardingRule" && r.name == web_lb)
        .unwrap();
    assert_eq!(orphan.service.namespace, "default");
    audit.delete(&orphan.service).await.unwrap();
    let owned = audit.owned_resources().await.unwrap();
    let mut want: BTreeMap<(String, String), String> = BTreeMap::new();
    want.extend(external_resources(&api_lb, "default/api"));
    want.extend(shared_node_check());
    assert_eq!(by_service(&owned), want, "only web's resources went");

    // The shared pieces are still used by `api`: deleting them as recorded keeps them.
    let shared = owned.iter().find(|r| r.shared).unwrap();
    let plan = without_mutations(&gce, &audit, audit.plan_delete(&shared.service))
        .await
        .unwrap();
    assert_eq!(plan, vec![], "nothing to delete while in use");
    audit.delete(&shared.service).await.unwrap();
    assert_eq!(
        by_service(&audit.owned_resources().await.unwrap()),
        want,
        "a shared check in use stays"
    );
    // `api` is still served as before.
    let plan = controller.plan_ensure(&api(), &nodes()).await.unwrap();
    assert_eq!(plan, vec![]);
}

#[tokio::test]
async fn unused_shared_pieces_are_listed_and_removed_but_another_clusters_are_not() {
    let gce = mock().await;
    let http = reqwest::Client::new();
    let base = format!("{}/compute/v1/projects/{}", gce.url(), gce.project());
    let cluster = |id: &str| json!({ "kubernetes.io/cluster-id": id }).to_string();
    for (collection, body) in [
        (
            "global/httpHealthChecks",
            json!({"name": "k8s-c1-node", "port": 10256, "requestPath": "/healthz",
                "description": cluster("c1")}),
        ),
        (
            "global/firewalls",
            json!({"name": "k8s-c1-node-http-hc", "network": "global/networks/default",
                "allowed": [{"IPProtocol": "tcp", "ports": ["10256"]}],
                "sourceRanges": HEALTH_RANGES, "targetTags": [TAG], "description": cluster("c1")}),
        ),
        (
            "global/httpHealthChecks",
            json!({"name": "k8s-c2-node", "port": 10256, "requestPath": "/healthz",
                "description": cluster("c2")}),
        ),
    ] {
        post_accepted(&http, format!("{base}/{collection}"), body).await;
    }
    let provider = provider(&gce).await;
    let owned = without_mutations(&gce, &provider, provider.owned_resources())
        .await
        .unwrap();
    assert_eq!(
        by_service(&owned),
        shared_node_check().into_iter().collect()
    );
    let plan = without_mutations(&gce, &provider, provider.plan_delete(&owned[0].service))
        .await
        .unwrap();
    assert_eq!(
        summary(&plan),
        [
            "delete HttpHealthCheck k8s-c1-node",
            "delete Firewall k8s-c1-node-http-hc"
        ]
    );
    for resource in &owned {
        provider.delete(&resource.service).await.unwrap();
    }
    assert_eq!(provider.owned_resources().await.unwrap(), vec![]);
    assert_eq!(gce.names("httpHealthChecks"), ["k8s-c2-node"]);
    assert!(gce.names("firewalls").is_empty());
}

/// A refused or throttled read fails the whole call, naming the call: never a shorter
/// listing or an empty plan.
#[tokio::test]
async fn a_refused_read_is_an_error_never_a_partial_answer() {
    let forbidden = || {
        FaultResponse::Http(ApiError::new(
            403,
            "forbidden",
            "Required 'compute.firewalls.list' permission",
        ))
    };
    // (what is refused, path pattern, method, the call the error must name)
    let cases = [
        (
            "firewall list",
            "/global/firewalls$",
            "owned",
            "firewalls.list",
        ),
        (
            "forwarding rule list",
            "/forwardingRules$",
            "owned",
            "forwardingRules.list",
        ),
        (
            "instance group list",
            "/zones/us-central1-b/instanceGroups$",
            "owned",
            "instanceGroups.list",
        ),
        (
            "forwarding rule read",
            "/forwardingRules/a",
            "plan",
            "forwardingRules.get",
        ),
        (
            "target pool read",
            "/targetPools/a",
            "plan-delete",
            "targetPools.get",
        ),
    ];
    let gce = mock().await;
    let provider = provider(&gce).await;
    provider.ensure(&web(), &nodes()).await.unwrap();
    for (what, path, method, call) in cases {
        gce.inject(Fault::on("GET", path, forbidden()).times(100));
        let error: ProviderError = match method {
            "owned" => provider.owned_resources().await.map(|_| ()),
            "plan" => provider.plan_ensure(&web(), &nodes()).await.map(|_| ()),
            _ => provider.plan_delete(&web().service).await.map(|_| ()),
        }
        .unwrap_err();
        gce.clear_faults();
        assert!(error.to_string().contains(call), "{what}: {error}");
        assert_eq!(error.class(), "environment", "{what}: {error}");
    }

    // Throttling that outlasts the retries is an error too.
    gce.throttle(100, 0);
    let error = provider.owned_resources().await.unwrap_err();
    assert!(error.is_retryable(), "{error}");
}

/// Paged listings are followed to the end: more firewalls than one page holds.
#[tokio::test]
async fn listings_follow_every_page() {
    let gce = mock().await;
    let http = reqwest::Client::new();
    let base = format!("{}/compute/v1/projects/{}", gce.url(), gce.project());
    let mark = json!({"kubernetes.io/service-name": "default/web"}).to_string();
    for i in 0..520 {
        let body = json!({"name": format!("k8s-fw-a{i:031}"), "network": "global/networks/default",
            "allowed": [{"IPProtocol": "tcp", "ports": ["80"]}], "sourceRanges": ["0.0.0.0/0"],
            "description": mark});
        post_accepted(&http, format!("{base}/global/firewalls"), body).await;
    }
    let provider = provider(&gce).await;
    let owned = provider.owned_resources().await.unwrap();
    assert_eq!(owned.len(), 520);
    assert_eq!(provider.calls().snapshot().operation("firewalls.list"), 2);
}

/// Migration from cloud-provider-gcp: three external load balancers built in the mock the
/// way upstream builds them (reference/gcp-azure.md §1.2, §1.4): forwarding rule `a<uid>` on
/// an ephemeral IP (upstream releases its address reservation at the end of every sync),
/// target pool `a<uid>`, traffic firewall `k8s-fw-a<uid>` with upstream's description text,
/// and the shared node health check `k8s-<cid>-node` (marked with its own name) with its
/// firewall, whose destination upstream set to the first Service's IP. `api` uses a
/// user-reserved static IP (`loadBalancerIP`); `shop` is `Local`, with upstream's per-Service
/// health check `a<uid>` and its firewall `k8s-a<uid>-http-hc`.
///
/// The plan shows what adoption changes: an IP upstream left ephemeral is reserved as address
/// `a<uid>` (the same IP), and the health-check firewalls lose upstream's destination (the
/// per-Service one also gets kube-lb's description). The forwarding rules, target pools,
/// traffic firewalls and health checks are adopted as they are. Once the shared firewall is
/// fixed, `api`'s plan is empty: kube-lb adopts it exactly.
#[tokio::test]
async fn migration_from_upstream_shows_what_adoption_changes() {
    let gce = mock().await;
    let http = reqwest::Client::new();
    let base = format!("{}/compute/v1/projects/{}", gce.url(), gce.project());
    let region = format!("{base}/regions/us-central1");
    let post = |url: String, body: Value| post_accepted(&http, url, body);
    let service_mark = |service: &str| format!(r#"{{"kubernetes.io/service-name":"{service}"}}"#);
    let firewall_mark = |service: &str, ip: &str| {
        // Upstream's exact text (makeFirewallDescription): name first, a space after the comma.
        format!(
            r#"{{"kubernetes.io/service-name":"{service}", "kubernetes.io/service-ip":"{ip}"}}"#
        )
    };
    let (web_lb, api_lb) = (load_balancer_name(UID_WEB), load_balancer_name(UID_API));
    let shop_lb = load_balancer_name(UID_SHOP);
    let instances: Vec<String> = [
        "us-central1-a/instances/gke-c1-node-1",
        "us-central1-b/instances/gke-c1-node-2",
    ]
    .iter()
    .map(|i| format!("{base}/zones/{i}"))
    .collect();

    // The node health check (upstream marks it with its own name) and the user's static IP.
    post(
        format!("{base}/global/httpHealthChecks"),
        json!({"name": "k8s-c1-node", "port": 10256, "requestPath": "/healthz",
            "checkIntervalSec": 8, "timeoutSec": 1, "healthyThreshold": 1, "unhealthyThreshold": 3,
            "description": service_mark("k8s-c1-node")}),
    )
    .await;
    post(
        format!("{region}/addresses"),
        json!({"name": "api-static", "address": "203.0.113.77"}),
    )
    .await;
    // Per Service: (for Local, its own health check on the health-check node port), target
    // pool, the rule (ephemeral IP unless loadBalancerIP), then the firewalls.
    for (lb, name, ip, local) in [
        (&web_lb, "default/web", None, false),
        (&api_lb, "default/api", Some("203.0.113.77"), false),
        (&shop_lb, "default/shop", None, true),
    ] {
        let check = if local {
            post(
                format!("{base}/global/httpHealthChecks"),
                json!({"name": lb, "port": 31000, "requestPath": "/healthz",
                    "checkIntervalSec": 8, "timeoutSec": 1, "healthyThreshold": 1,
                    "unhealthyThreshold": 3, "description": service_mark(lb)}),
            )
            .await;
            lb.to_string()
        } else {
            "k8s-c1-node".to_string()
        };
        post(
            format!("{region}/targetPools"),
            json!({"name": lb, "description": service_mark(name), "instances": instances,
                "healthChecks": [format!("{base}/global/httpHealthChecks/{check}")],
                "sessionAffinity": "NONE"}),
        )
        .await;
        let mut rule = json!({"name": lb, "description": service_mark(name), "IPProtocol": "TCP",
            "portRange": "80-443", "target": format!("{region}/targetPools/{lb}"),
            "loadBalancingScheme": "EXTERNAL", "networkTier": "PREMIUM"});
        if let Some(ip) = ip {
            rule["IPAddress"] = json!(ip);
        }
        post(format!("{region}/forwardingRules"), rule).await;
        let ip = gce.resource("forwardingRules", lb).unwrap()["IPAddress"]
            .as_str()
            .unwrap()
            .to_string();
        post(
            format!("{base}/global/firewalls"),
            json!({"name": format!("k8s-fw-{lb}"), "description": firewall_mark(name, &ip),
                "network": "global/networks/default",
                "allowed": [{"IPProtocol": "tcp", "ports": ["80", "443"]}],
                "sourceRanges": ["0.0.0.0/0"], "destinationRanges": [ip], "targetTags": [TAG]}),
        )
        .await;
        if local {
            post(
                format!("{base}/global/firewalls"),
                json!({"name": format!("k8s-{lb}-http-hc"), "description": firewall_mark(name, &ip),
                    "network": "global/networks/default",
                    "allowed": [{"IPProtocol": "tcp", "ports": ["31000"]}],
                    "sourceRanges": HEALTH_RANGES, "destinationRanges": [ip], "targetTags": [TAG]}),
            )
            .await;
        }
    }
    let web_ip = gce.resource("forwardingRules", &web_lb).unwrap()["IPAddress"]
        .as_str()
        .unwrap()
        .to_string();
    post(
        format!("{base}/global/firewalls"),
        json!({"name": "k8s-c1-node-http-hc",
            "description": json!({"kubernetes.io/cluster-id": "c1"}).to_string(),
            "network": "global/networks/default",
            "allowed": [{"IPProtocol": "tcp", "ports": ["10256"]}],
            "sourceRanges": HEALTH_RANGES, "destinationRanges": [web_ip], "targetTags": [TAG]}),
    )
    .await;
    let api = service("api", UID_API, |m| {
        m["spec"]["loadBalancerIP"] = json!("203.0.113.77");
    });
    let shop = service("shop", UID_SHOP, |m| {
        m["spec"]["externalTrafficPolicy"] = json!("Local");
        m["spec"]["healthCheckNodePort"] = json!(31000);
    });
    let shop_ip = gce.resource("forwardingRules", &shop_lb).unwrap()["IPAddress"]
        .as_str()
        .unwrap()
        .to_string();

    let provider = provider(&gce).await;
    // The audit recognises upstream's resources as the cluster's, by Service.
    let owned = provider.owned_resources().await.unwrap();
    let recorded: BTreeMap<(String, String), String> = by_service(&owned);
    assert_eq!(
        recorded[&("TargetPool".to_string(), web_lb.clone())],
        "default/web"
    );
    assert_eq!(
        recorded[&("Firewall".to_string(), format!("k8s-fw-{api_lb}"))],
        "default/api"
    );
    assert_eq!(
        recorded[&("HttpHealthCheck".to_string(), "k8s-c1-node".to_string())],
        "shared"
    );

    let plan = without_mutations(&gce, &provider, provider.plan_ensure(&web(), &nodes()))
        .await
        .unwrap();
    assert_eq!(
        summary(&plan),
        [
            format!("create Address {web_lb}"),
            "modify Firewall k8s-c1-node-http-hc".to_string(),
        ],
        "{plan:#?}"
    );
    let address = fields(find(&plan, "addresses.insert", &web_lb));
    assert_eq!(
        address["address"],
        (None, Some(web_ip.clone())),
        "the IP is kept"
    );
    let health_firewall = fields(find(&plan, "firewalls.update", "k8s-c1-node-http-hc"));
    assert_eq!(
        health_firewall,
        BTreeMap::from([(
            "destinationRanges".to_string(),
            (Some(web_ip.clone()), None)
        )])
    );
    let plan = without_mutations(&gce, &provider, provider.plan_ensure(&api, &nodes()))
        .await
        .unwrap();
    assert_eq!(
        summary(&plan),
        ["modify Firewall k8s-c1-node-http-hc"],
        "{plan:#?}"
    );

    // Local: upstream's own health check is kept as it is; its firewall loses the destination
    // and gets kube-lb's description (upstream's also names the IP).
    let plan = without_mutations(&gce, &provider, provider.plan_ensure(&shop, &nodes()))
        .await
        .unwrap();
    assert_eq!(
        summary(&plan),
        [
            format!("create Address {shop_lb}"),
            format!("modify Firewall k8s-{shop_lb}-http-hc"),
        ],
        "{plan:#?}"
    );
    let health_firewall = fields(find(
        &plan,
        "firewalls.update",
        &format!("k8s-{shop_lb}-http-hc"),
    ));
    assert_eq!(
        health_firewall,
        BTreeMap::from([
            (
                "description".to_string(),
                (
                    Some(firewall_mark("default/shop", &shop_ip)),
                    Some(service_mark("default/shop"))
                )
            ),
            (
                "destinationRanges".to_string(),
                (Some(shop_ip.clone()), None)
            ),
        ])
    );
    provider.ensure(&shop, &nodes()).await.unwrap();
    assert_plans_nothing(&gce, &provider, &shop, "shop is in sync after one ensure").await;

    // Adopting web: its rule is kept (same resource, same IP), and api then needs nothing.
    let rule_before = gce.resource("forwardingRules", &web_lb).unwrap();
    provider.ensure(&web(), &nodes()).await.unwrap();
    let rule_after = gce.resource("forwardingRules", &web_lb).unwrap();
    assert_eq!(
        rule_after["id"], rule_before["id"],
        "the rule was not re-created"
    );
    assert_eq!(rule_after["IPAddress"], json!(web_ip));
    assert_plans_nothing(&gce, &provider, &api, "api is adopted exactly").await;
    assert_plans_nothing(&gce, &provider, &web(), "web is in sync after one ensure").await;
}

/// Migration of an internal (ILB) Service from cloud-provider-gcp: the state upstream leaves
/// (reference/gcp-azure.md §1.5, §1.6) built in the mock by hand — the per-zone instance
/// groups `k8s-ig--c1` holding the nodes, the shared new-style health check `k8s-c1-node`
/// (`/healthz:10256`, upstream's 8/1/1/3), the backend service `a<uid>` over the groups, an
/// internal forwarding rule on an address upstream released after the sync (its address
/// manager reserves and releases on every pass), the traffic firewall `k8s-fw-a<uid>` with
/// upstream's description naming the IP, and the shared health-check firewall
/// `k8s-c1-node-hc` with the cluster mark.
///
/// The plan shows what adoption changes and nothing else: the internal IP is reserved under
/// the rule's name (the same IP, so clients see no change); the groups, health check, backend
/// service, rule and firewalls are adopted as they are. After one ensure the plan is empty.
#[tokio::test]
async fn migration_from_upstream_internal_load_balancer_shows_what_adoption_changes() {
    let gce = mock().await;
    let http = reqwest::Client::new();
    let base = format!("{}/compute/v1/projects/{}", gce.url(), gce.project());
    let region = format!("{base}/regions/us-central1");
    let post = |url: String, body: Value| post_accepted(&http, url, body);
    let lb = load_balancer_name(UID_WEB);
    let mark = |service: &str| format!(r#"{{"kubernetes.io/service-name":"{service}"}}"#);
    let internal = service("web", UID_WEB, |m| {
        m["metadata"]["annotations"]["networking.gke.io/load-balancer-type"] = json!("Internal");
    });

    // One unmanaged group per zone, with that zone's nodes.
    for (zone, node) in [(ZONE_A, "gke-c1-node-1"), (ZONE_B, "gke-c1-node-2")] {
        let groups = format!("{base}/zones/{zone}/instanceGroups");
        post(
            groups.clone(),
            json!({"name": "k8s-ig--c1", "network": format!("{base}/global/networks/default")}),
        )
        .await;
        post(
            format!("{groups}/k8s-ig--c1/addInstances"),
            json!({"instances": [{"instance": format!("{base}/zones/{zone}/instances/{node}")}]}),
        )
        .await;
    }
    post(
        format!("{base}/global/healthChecks"),
        json!({"name": "k8s-c1-node", "type": "HTTP", "description": mark("k8s-c1-node"),
            "httpHealthCheck": {"port": 10256, "requestPath": "/healthz"},
            "checkIntervalSec": 8, "timeoutSec": 1, "healthyThreshold": 1,
            "unhealthyThreshold": 3}),
    )
    .await;
    post(
        format!("{region}/backendServices"),
        json!({"name": lb, "description": mark("default/web"), "protocol": "TCP",
        "loadBalancingScheme": "INTERNAL", "sessionAffinity": "NONE",
        "healthChecks": [format!("{base}/global/healthChecks/k8s-c1-node")],
        "backends": [
            {"group": format!("{base}/zones/{ZONE_A}/instanceGroups/k8s-ig--c1")},
            {"group": format!("{base}/zones/{ZONE_B}/instanceGroups/k8s-ig--c1")},
        ]}),
    )
    .await;
    post(
        format!("{region}/forwardingRules"),
        json!({"name": lb, "description": mark("default/web"), "IPProtocol": "TCP",
            "ports": ["80", "443"], "loadBalancingScheme": "INTERNAL",
            "backendService": format!("{region}/backendServices/{lb}"),
            "network": format!("{base}/global/networks/default"),
            "subnetwork": format!("{region}/subnetworks/default")}),
    )
    .await;
    let ip = gce.resource("forwardingRules", &lb).unwrap()["IPAddress"]
        .as_str()
        .unwrap()
        .to_string();
    post(
        format!("{base}/global/firewalls"),
        json!({"name": format!("k8s-fw-{lb}"),
            "description": format!(
                r#"{{"kubernetes.io/service-name":"default/web", "kubernetes.io/service-ip":"{ip}"}}"#
            ),
            "network": "global/networks/default",
            "allowed": [{"IPProtocol": "tcp", "ports": ["80", "443"]}],
            "sourceRanges": ["0.0.0.0/0"], "destinationRanges": [ip], "targetTags": [TAG]}),
    )
    .await;
    post(
        format!("{base}/global/firewalls"),
        json!({"name": "k8s-c1-node-hc",
            "description": json!({"kubernetes.io/cluster-id": "c1"}).to_string(),
            "network": "global/networks/default",
            "allowed": [{"IPProtocol": "tcp", "ports": ["10256"]}],
            "sourceRanges": HEALTH_RANGES, "targetTags": [TAG]}),
    )
    .await;

    let provider = provider(&gce).await;
    let owned = provider.owned_resources().await.unwrap();
    let recorded = by_service(&owned);
    assert_eq!(
        recorded[&("BackendService".to_string(), lb.clone())],
        "default/web"
    );
    assert_eq!(
        recorded[&("ForwardingRule".to_string(), lb.clone())],
        "default/web"
    );

    let plan = without_mutations(&gce, &provider, provider.plan_ensure(&internal, &nodes()))
        .await
        .unwrap();
    assert_eq!(
        summary(&plan),
        [format!("create Address {lb}")],
        "{plan:#?}"
    );
    let address = fields(find(&plan, "addresses.insert", &lb));
    assert_eq!(
        address["address"],
        (None, Some(ip.clone())),
        "the IP is kept"
    );

    let rule_before = gce.resource("forwardingRules", &lb).unwrap();
    let backends_before = gce.resource("backendServices", &lb).unwrap();
    provider.ensure(&internal, &nodes()).await.unwrap();
    let rule_after = gce.resource("forwardingRules", &lb).unwrap();
    assert_eq!(
        rule_after["id"], rule_before["id"],
        "the rule was adopted, not re-created"
    );
    assert_eq!(rule_after["IPAddress"], json!(ip));
    assert_eq!(
        gce.resource("backendServices", &lb).unwrap()["id"],
        backends_before["id"],
        "the backend service was adopted"
    );
    assert_plans_nothing(&gce, &provider, &internal, "in sync after one ensure").await;
}
