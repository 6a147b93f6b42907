//! `kube-lb plan` and `kube-lb audit` with `--cloud tencent`: the binary against the CLB mock
//! and a cluster in the embedded API server (through a kubeconfig, so the Services keep the
//! UIDs their CLBs are tagged with). The cloud state is built by hand the way TKE's own service
//! controller leaves it (`reference/other-clouds.md` §2.2): tags `tke-createdBy-flag=yes`,
//! `tke-clusterId`, `tke-lb-serviceuuid`, one `TKE-DEDICATED-LISTENER` per port, nodes bound by
//! CVM instance, and the CLB id written back as `service.kubernetes.io/loadbalance-id`. These
//! are the migration checks, and the audit's orphan check; the mock's journal shows that
//! planning and auditing make no mutating call.
#![cfg(feature = "tencent")]

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_lb_apiserver::{ApiServer, RunningApiServer};
use kube_lb_mock_tencent::MockTencent;
use serde_json::{Value, json};

use crate::plan_audit_support::{
    self, CloudFlags, ClusterSource, change_line, changes_of_only_service, leaked_resources,
    mutations_since, owned,
};
use crate::provider_scenarios::scenarios::tencent::support::{
    self, CLUSTER, build_tke_state, cloud_config,
};

/// The nodes TKE bound, by CVM instance.
const INSTANCES: [(&str, &str, &str); 2] = [
    ("node-1", "10.0.0.11", "ins-0000aaaa"),
    ("node-2", "10.0.0.12", "ins-0000bbbb"),
];

/// The binary's flags for the mock and the cluster TKE's tags name.
static TENCENT: CloudFlags = CloudFlags {
    flags: &["--cloud", "tencent", "--cluster-name", CLUSTER],
    config_file: "tencent.json",
    env_remove: &["KUBE_LB_CLOUD_CONFIG"],
};

/// The API server with TKE's nodes (providerID `qcloud:///<zone>/<instance>`), the mock, and
/// the kubeconfig and cloud-config files.
struct Setup {
    server: RunningApiServer,
    cloud: MockTencent,
    dir: tempfile::TempDir,
}

impl Setup {
    async fn start() -> Setup {
        let server = ApiServer::builder().start().await.unwrap();
        for (name, ip, instance) in INSTANCES {
            server
                .seed(json!({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name},
                    "spec": {"providerID": format!("qcloud:///800002/{instance}")},
                    "status": {
                        "addresses": [{"type": "InternalIP", "address": ip}],
                        "conditions": [{"type": "Ready", "status": "True"}]
                    }
                }))
                .unwrap();
        }
        let cloud = MockTencent::builder().start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        server
            .write_kubeconfig(dir.path().join("kubeconfig"))
            .unwrap();
        std::fs::write(dir.path().join("tencent.json"), cloud_config(&cloud)).unwrap();
        Setup { server, cloud, dir }
    }

    /// Creates LoadBalancer Service `name` (port 80, nodePort 30080, `extra_spec` merged in)
    /// as TKE served it: its CLB built as TKE builds it and the CLB id written back. Returns
    /// the Service's UID and the CLB id.
    async fn tke_service(&self, name: &str, extra_spec: Value) -> (String, String) {
        let mut spec = json!({
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080,
                       "protocol": "TCP"}],
        });
        if let (Value::Object(spec), Value::Object(extra)) = (&mut spec, extra_spec) {
            spec.extend(extra);
        }
        let api = Api::<Service>::namespaced(self.server.client().unwrap(), "default");
        let mut service: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        }))
        .unwrap();
        let created = api.create(&PostParams::default(), &service).await.unwrap();
        let uid = created.metadata.uid.clone().unwrap();
        let instances: Vec<&str> = INSTANCES.iter().map(|(_, _, i)| *i).collect();
        let lb = build_tke_state(
            &self.cloud,
            CLUSTER,
            &uid,
            &format!("{CLUSTER}_default_{name}"),
            &[("TCP", 80, 30080)],
            &instances,
        );
        service = created;
        service
            .metadata
            .annotations
            .get_or_insert_default()
            .insert("service.kubernetes.io/loadbalance-id".into(), lb.clone());
        api.replace(name, &PostParams::default(), &service)
            .await
            .unwrap();
        (uid, lb)
    }

    /// Runs the binary with `args` (blocking, off the runtime's threads; the API server and the
    /// mock answer on them): (exit code, stdout, stderr).
    async fn kube_lb(&self, args: &[&str]) -> (i32, String, String) {
        let dir = self.dir.path().to_path_buf();
        plan_audit_support::run(&TENCENT, dir, ClusterSource::Kubeconfig, owned(args)).await
    }

    fn mutations_since(&self, mark: usize) -> Vec<String> {
        mutations_since(&self.cloud.journal(), mark)
    }
}

/// `action kind name (call) [field: old → new]` of every planned change of the only Service.
fn changes(report: &Value) -> Vec<String> {
    changes_of_only_service(report)
        .iter()
        .map(|c| {
            let fields: Vec<String> = c["fields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| format!("{}: {} → {}", f["field"], f["old"], f["new"]))
                .collect();
            format!("{} {fields:?}", change_line(c))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_from_tke_adopts_its_clb_exactly_and_mutates_nothing() {
    let s = Setup::start().await;
    let (_, lb) = s.tke_service("web", json!({})).await;
    let mark = s.cloud.journal().len();
    let (code, stdout, stderr) = s
        .kube_lb(&["plan", "-o", "json", "--detailed-exitcode"])
        .await;
    assert_eq!(code, 0, "nothing to change: {stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(changes(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(report["services"][0]["status"], "inSync", "{report:#}");
    assert_eq!(s.mutations_since(mark), Vec::<String>::new());
    // TKE's CLB, listener and CVM targets are what kube-lb reads as its own.
    assert_eq!(
        support::bindings(&s.cloud, &lb)["TCP:80"],
        vec!["ins-0000aaaa:30080", "ins-0000bbbb:30080"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_from_tke_with_local_traffic_plans_the_health_check_and_honours_bind_with_pod() {
    // TKE binds every node for Local (without local-svc-only-bind-node-with-pod) and checks
    // the NodePort over TCP; kube-lb binds the same nodes and checks the health-check node
    // port over HTTP: adoption changes only the check. With the annotation, only nodes with a
    // ready endpoint stay bound: node-2 is unbound.
    let s = Setup::start().await;
    let (_, lb) = s
        .tke_service(
            "web",
            json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 32100}),
        )
        .await;
    s.server
        .seed(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": true},
                           "nodeName": "node-1"}]
        }))
        .unwrap();
    let mark = s.cloud.journal().len();
    let health_check = format!(
        r#"modify Listener {lb}/TCP:80 (ModifyListener) ["\"HealthCheck\": \"TCP\" → \"HTTP:32100/healthz\""]"#
    );
    let (code, stdout, stderr) = s
        .kube_lb(&["plan", "-o", "json", "--detailed-exitcode"])
        .await;
    assert_eq!(code, 2, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(changes(&report), vec![health_check.clone()], "{report:#}");

    let api = Api::<Service>::namespaced(s.server.client().unwrap(), "default");
    let opt_in = json!({"metadata": {"annotations": {
        "service.kubernetes.io/local-svc-only-bind-node-with-pod": "true"}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&opt_in))
        .await
        .unwrap();
    let (code, stdout, stderr) = s
        .kube_lb(&["plan", "-o", "json", "--detailed-exitcode"])
        .await;
    assert_eq!(code, 2, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        changes(&report),
        vec![
            health_check,
            format!(
                r#"modify Targets {lb} (BatchDeregisterTargets) ["\"Targets\": \"ins-0000bbbb:30080\" → null"]"#
            ),
        ],
        "{report:#}"
    );
    assert_eq!(report["summary"]["delete"], 0, "adoption replaces nothing");
    assert_eq!(s.mutations_since(mark), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_finds_exactly_the_orphaned_clb_and_delete_removes_exactly_it() {
    let s = Setup::start().await;
    let (_, web_lb) = s.tke_service("web", json!({})).await;
    // A Service deleted while no controller ran: its CLB stays, tagged with its UID.
    let orphan_uid = "0c5e2f1a-7b3d-4e9f-8a6b-5c4d3e2f1a0b";
    let orphan = build_tke_state(
        &s.cloud,
        CLUSTER,
        orphan_uid,
        &format!("{CLUSTER}_default_old"),
        &[("TCP", 80, 30081)],
        &["ins-0000aaaa"],
    );
    // Never ours: a user's CLB, and another cluster's.
    let users =
        s.cloud
            .seed_load_balancer("users-clb", &[("team", "edge")], &[("console", "TCP", 22)]);
    let other = build_tke_state(
        &s.cloud,
        "cls-other",
        orphan_uid,
        "cls-other_default_old",
        &[("TCP", 80, 30081)],
        &["ins-0000cccc"],
    );
    let mark = s.cloud.journal().len();

    let (code, stdout, stderr) = s.kube_lb(&["audit", "-o", "json"]).await;
    assert_eq!(code, 2, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let leaked = leaked_resources(&report, "uid");
    assert_eq!(
        leaked,
        vec![(
            "LoadBalancer".to_string(),
            orphan.clone(),
            orphan_uid.to_string(),
            "ServiceDeleted".to_string()
        )],
        "{report:#}"
    );
    assert_eq!(report["owned"], 2, "web's and the orphan: {report:#}");
    assert_eq!(s.mutations_since(mark), Vec::<String>::new());

    let (code, stdout, stderr) = s.kube_lb(&["audit", "--delete"]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains(&orphan), "{stdout}");
    let deleted: Vec<Value> = s.cloud.journal()[mark..]
        .iter()
        .filter(|e| e.is_mutation())
        .map(|e| json!({"action": e.action, "ids": e.body["LoadBalancerIds"]}))
        .collect();
    assert_eq!(
        deleted,
        vec![json!({"action": "DeleteLoadBalancer", "ids": [orphan]})],
        "exactly the orphan"
    );
    let left: Vec<String> = s
        .cloud
        .load_balancers()
        .iter()
        .map(|lb| lb["LoadBalancerId"].as_str().unwrap().to_string())
        .collect();
    for kept in [&web_lb, &users, &other] {
        assert!(left.contains(kept), "{kept} kept: {left:?}");
    }
    assert_eq!(left.len(), 3, "{left:?}");

    let (code, stdout, stderr) = s.kube_lb(&["audit"]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        stdout,
        "No leaked resources: 1 owned by this cluster, all in use.\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_ranges_on_an_adopted_clb_plan_its_security_group_and_mutate_nothing() {
    // TKE's CLB had no security group: restricting it to the ranges is planned as the three
    // calls ensure makes (before any listener change), and planning makes none of them.
    let s = Setup::start().await;
    let (uid, lb) = s
        .tke_service(
            "web",
            json!({"loadBalancerSourceRanges": ["143.231.0.0/16"]}),
        )
        .await;
    let mark = s.cloud.journal().len();
    let (code, stdout, stderr) = s
        .kube_lb(&["plan", "-o", "json", "--detailed-exitcode"])
        .await;
    assert_eq!(code, 2, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let lines: Vec<String> = changes_of_only_service(&report)
        .iter()
        .map(change_line)
        .collect();
    assert_eq!(
        lines,
        [
            format!("create SecurityGroup kube-lb-{uid} (CreateSecurityGroup)"),
            format!("modify SecurityGroup kube-lb-{uid} (ModifySecurityGroupPolicies)"),
            format!("modify LoadBalancer {lb} (SetLoadBalancerSecurityGroups)"),
        ],
        "{report:#}"
    );
    assert_eq!(s.mutations_since(mark), Vec::<String>::new());
    assert!(s.cloud.security_groups().is_empty());
}
