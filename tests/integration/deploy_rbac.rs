//! The RBAC rules in `deploy/` are exactly what the code uses: the controller and the proxy
//! binaries run against the in-memory API server through a recording HTTP proxy, every request
//! is turned into an RBAC (apiGroup, resource, verb), and that set must equal the rules granted
//! to each ServiceAccount — nothing missing (the pod would fail) and nothing unused. The
//! controller is run once per `--cloud`, against that cloud's mock, and compared with what the
//! overlay of that cloud grants as `kubectl kustomize` renders it: the `local` provider's
//! IPPool and Namespace access (`deploy/components/local-pools`) only where it runs. The BGP
//! component's proxy grants (`deploy/components/bgp`) are checked as written until the speaker
//! that uses them exists: its kinds, MetalLB's read-only, and one Secret by name.

#![allow(clippy::unwrap_used)] // test set-up: a failed unwrap is a failed test

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube_lb_apiserver::{ApiServer, RunningApiServer};
use serde_json::json;

/// One RBAC permission: (apiGroup, resource[/subresource], verb). A rule restricted by
/// `resourceNames` grants `resource#name` for each name.
type Permission = (String, String, String);

/// One request the recorder saw: the permission it needs, and the object it names (if any).
type Seen = (Permission, Option<String>);

/// Whether the granted permission `grant` allows `request`: same group, resource and verb,
/// either for every object or for the one the request names.
fn allows(grant: &Permission, request: &Seen) -> bool {
    let ((group, resource, verb), name) = request;
    grant.0 == *group
        && grant.2 == *verb
        && (grant.1 == *resource
            || name
                .as_ref()
                .is_some_and(|name| grant.1 == format!("{resource}#{name}")))
}

/// The permission to `verb` `resource` of API group `group` ("" for the core group).
fn permission(group: &str, resource: &str, verb: &str) -> Permission {
    (group.to_string(), resource.to_string(), verb.to_string())
}

/// A resource path's API group and what follows the namespace: `[resource, name?, sub?]`;
/// `None` for non-resource URLs (discovery, /version).
fn resource_path(path: &str) -> Option<(&str, Vec<&str>)> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    // Namespaced paths start with namespaces/<ns>/<resource>; `namespaces/<name>` alone is the
    // Namespace object itself.
    let rest = match rest {
        ["namespaces", _ns, resource, tail @ ..] => [&[*resource][..], tail].concat(),
        other => other.to_vec(),
    };
    Some((group, rest))
}

/// Maps a Kubernetes API request to the permission it needs; `None` for non-resource URLs
/// (discovery, /version), which every authenticated user may read.
fn permission_for(method: &str, path: &str, query: &str) -> Option<Permission> {
    let (group, rest) = resource_path(path)?;
    let (resource, name, subresource) = match rest.as_slice() {
        [] => return None,
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(*name), None),
        [resource, name, sub, ..] => (*resource, Some(*name), Some(*sub)),
    };
    let watching = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match (method, name) {
        ("GET", _) if watching => "watch",
        ("GET", Some(_)) => "get",
        ("GET", None) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", Some(_)) => "delete",
        ("DELETE", None) => "deletecollection",
        _ => return None,
    };
    let resource = match subresource {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.to_string(),
    };
    Some(permission(group, &resource, verb))
}

/// The object a request path names (`…/namespaces/kube-system`, `…/services/web/status`).
fn object_name(path: &str) -> Option<String> {
    let (_, rest) = resource_path(path)?;
    rest.get(1).map(ToString::to_string)
}

#[test]
fn requests_name_their_object_and_resource_names_restrict_grants() {
    for (path, want) in [
        ("/api/v1/namespaces/kube-system", Some("kube-system")),
        ("/api/v1/namespaces", None),
        ("/api/v1/namespaces/d/services", None),
        ("/api/v1/namespaces/d/services/web/status", Some("web")),
        (
            "/apis/coordination.k8s.io/v1/namespaces/s/leases/l",
            Some("l"),
        ),
        ("/version", None),
    ] {
        assert_eq!(object_name(path).as_deref(), want, "{path}");
    }
    let get = |name: Option<&str>| {
        (
            permission("", "namespaces", "get"),
            name.map(ToString::to_string),
        )
    };
    let only_kube_system = permission("", "namespaces#kube-system", "get");
    assert!(allows(&only_kube_system, &get(Some("kube-system"))));
    assert!(!allows(&only_kube_system, &get(Some("default"))));
    assert!(!allows(&only_kube_system, &get(None)));
    assert!(allows(
        &permission("", "namespaces", "get"),
        &get(Some("default"))
    ));
}

#[test]
fn request_mapping_follows_the_rbac_rules_of_kube_apiserver() {
    let cases = [
        (
            "GET",
            "/api/v1/services",
            "watch=true&resourceVersion=1",
            Some(("", "services", "watch")),
        ),
        (
            "GET",
            "/api/v1/services",
            "limit=500",
            Some(("", "services", "list")),
        ),
        (
            "GET",
            "/api/v1/namespaces/d/services/web",
            "",
            Some(("", "services", "get")),
        ),
        (
            "PATCH",
            "/api/v1/namespaces/d/services/web/status",
            "",
            Some(("", "services/status", "patch")),
        ),
        (
            "POST",
            "/apis/events.k8s.io/v1/namespaces/d/events",
            "",
            Some(("events.k8s.io", "events", "create")),
        ),
        (
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/s/leases/l",
            "",
            Some(("coordination.k8s.io", "leases", "update")),
        ),
        (
            "GET",
            "/api/v1/namespaces/kube-system",
            "",
            Some(("", "namespaces", "get")),
        ),
        (
            "DELETE",
            "/api/v1/namespaces/d/services",
            "",
            Some(("", "services", "deletecollection")),
        ),
        ("GET", "/apis", "", None),
        ("GET", "/version", "", None),
    ];
    for (method, path, query, want) in cases {
        let got = permission_for(method, path, query);
        let want = want.map(|(group, resource, verb)| permission(group, resource, verb));
        assert_eq!(got, want, "{method} {path}?{query}");
    }
}

/// The permissions granted to `service_account` by the RBAC objects in `files`.
fn granted(files: &[&str], service_account: &str) -> BTreeSet<Permission> {
    let texts: Vec<String> = files
        .iter()
        .map(|file| {
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap()
        })
        .collect();
    granted_in(&texts, service_account)
}

/// What `kubectl kustomize deploy/overlays/<overlay>` renders (kubectl's built-in kustomize,
/// as `scripts/validate-deploy.sh` and `kubectl apply -k` use it). Without kubectl the test
/// fails: the overlays are what users apply, so they are what is checked.
fn rendered_overlay(overlay: &str) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/overlays")
        .join(overlay);
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .unwrap_or_else(|e| panic!("this test needs kubectl (with its built-in kustomize): {e}"));
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The permissions granted to `service_account` by the RBAC objects in the YAML `texts`.
fn granted_in(texts: &[String], service_account: &str) -> BTreeSet<Permission> {
    let mut roles = std::collections::BTreeMap::new();
    let mut bound = BTreeSet::new();
    for text in texts {
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let obj: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
            let kind = obj["kind"].as_str().unwrap_or_default();
            let name = obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            match kind {
                "ClusterRole" | "Role" => {
                    roles.insert((kind.to_string(), name), obj["rules"].clone());
                }
                "ClusterRoleBinding" | "RoleBinding" => {
                    let subjects = obj["subjects"].as_array().cloned().unwrap_or_default();
                    if subjects.iter().any(|s| s["name"] == service_account) {
                        bound.insert((
                            obj["roleRef"]["kind"].as_str().unwrap().to_string(),
                            obj["roleRef"]["name"].as_str().unwrap().to_string(),
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    let mut permissions = BTreeSet::new();
    for role in bound {
        let rules = roles
            .get(&role)
            .unwrap_or_else(|| panic!("binding to missing {role:?}"));
        for rule in rules.as_array().unwrap() {
            let strings = |key: &str| -> Vec<String> {
                rule[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect()
            };
            let names = if rule.get("resourceNames").is_some() {
                strings("resourceNames")
                    .into_iter()
                    .map(|name| format!("#{name}"))
                    .collect()
            } else {
                vec![String::new()]
            };
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        assert!(
                            !group.contains('*') && !resource.contains('*') && !verb.contains('*'),
                            "no wildcards in RBAC ({group} {resource} {verb})"
                        );
                        for name in &names {
                            permissions.insert((
                                group.clone(),
                                format!("{resource}{name}"),
                                verb.clone(),
                            ));
                        }
                    }
                }
            }
        }
    }
    permissions
}

/// A recording reverse proxy in front of the API server.
struct Recorder {
    addr: SocketAddr,
    seen: Arc<Mutex<BTreeSet<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    async fn start(upstream: String) -> Recorder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Recorder::serve(listener, upstream)
    }

    /// A recorder answering on `listener` (which may live in another network namespace).
    fn serve(listener: tokio::net::TcpListener, upstream: String) -> Recorder {
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let state = (upstream, reqwest::Client::new(), seen.clone());
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(Arc::new(state));
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Recorder { addr, seen, task }
    }

    /// A recorder answering on `listener`, a std listener bound inside a network namespace
    /// (made non-blocking for tokio here).
    fn serve_std(listener: std::net::TcpListener, upstream: String) -> Recorder {
        listener.set_nonblocking(true).unwrap();
        Recorder::serve(
            tokio::net::TcpListener::from_std(listener).unwrap(),
            upstream,
        )
    }

    /// The permissions the requests so far needed.
    fn seen(&self) -> BTreeSet<Permission> {
        self.requests()
            .into_iter()
            .map(|(permission, _)| permission)
            .collect()
    }

    /// The requests so far: permission and named object.
    fn requests(&self) -> BTreeSet<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn kubeconfig(&self, dir: &Path, name: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{}\n\
             users:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
             current-context: c\n",
            self.addr
        );
        std::fs::write(&path, text).unwrap();
        path
    }
}

type ProxyState = (String, reqwest::Client, Arc<Mutex<BTreeSet<Seen>>>);

async fn forward(State(state): State<Arc<ProxyState>>, request: Request) -> Response {
    let (upstream, client, seen) = &*state;
    let method = request.method().as_str().to_string();
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or_default().to_string();
    if let Some(permission) = permission_for(&method, &path, &query) {
        seen.lock()
            .unwrap()
            .insert((permission, object_name(&path)));
    }
    let url = if query.is_empty() {
        format!("{upstream}{path}")
    } else {
        format!("{upstream}{path}?{query}")
    };
    let mut outgoing = client.request(request.method().clone(), url);
    for (name, value) in request.headers() {
        if name != "host" {
            outgoing = outgoing.header(name, value);
        }
    }
    let body = axum::body::to_bytes(request.into_body(), usize::MAX)
        .await
        .unwrap();
    let response = outgoing.body(body).send().await.unwrap();
    let mut builder = Response::builder().status(response.status());
    for (name, value) in response.headers() {
        builder = builder.header(name, value);
    }
    // Stream the body so watches keep flowing through the proxy.
    let stream = response.bytes_stream().map_err(std::io::Error::other);
    builder.body(Body::from_stream(stream)).unwrap()
}

/// Every permission `who` used is granted and every granted one was used, except those in
/// `may_go_unused` (granted for what one short run does not produce).
fn assert_used_exactly(
    used: &BTreeSet<Seen>,
    granted: &BTreeSet<Permission>,
    who: &str,
    may_go_unused: &[Permission],
) {
    let missing: Vec<_> = used
        .iter()
        .filter(|request| !granted.iter().any(|grant| allows(grant, request)))
        .collect();
    assert!(
        missing.is_empty(),
        "{who} needs RBAC it is not granted: {missing:?}"
    );
    let unused: Vec<_> = granted
        .iter()
        .filter(|grant| !used.iter().any(|request| allows(grant, request)))
        .filter(|p| !may_go_unused.contains(p))
        .collect();
    assert!(
        unused.is_empty(),
        "RBAC granted to {who} but never used: {unused:?}"
    );
}

/// Whether the network-namespace lab can run here (root, ip netns, nft); where it cannot, the
/// test is skipped with a note, except under CI, which must run it.
fn netns_lab_available() -> bool {
    if kube_lb_dataplane::l2::lab::available() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but this test cannot run: it needs root, ip netns and nft"
    );
    eprintln!("SKIPPED: needs root + netns (ip netns, nft)");
    false
}

/// Kills the child process on drop so a failed assertion leaves nothing running.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `check` until it returns true, failing the test after `ceiling`.
async fn wait_for<F, Fut>(what: &str, ceiling: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < ceiling, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The local provider's address pools: the CRD from deploy/ and one pool, and a namespace, so
/// a controller that reads pools watches IPPools and namespaces and writes a pool status. Every
/// cloud's cluster has them too: a cloud provider's controller must leave them alone even when
/// they are there.
fn seed_pools(server: &RunningApiServer) {
    server
        .apply_manifests(kube_lb::controller::pools::IPPOOL_CRD)
        .unwrap();
    server
        .seed(
            json!({"apiVersion": "kube-lb.io/v1alpha1", "kind": "IPPool",
                     "metadata": {"name": "default"},
                     "spec": {"addresses": ["127.240.0.0/16"]}}),
        )
        .unwrap();
    server
        .seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-lb-system"}}))
        .ok();
}

async fn seed_cluster(server: &RunningApiServer) {
    seed_pools(server);
    server
        .seed(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }))
        .unwrap();
}

fn lb_service(name: &str, port: u16) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"type": "LoadBalancer", "selector": {"app": name},
                 "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}
    }))
    .unwrap()
}

fn has_ingress(svc: &Service) -> bool {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|i| !i.is_empty())
}

/// How long one step of a controller's lifecycle may take through the binary (process start,
/// informer sync, a cloud mock's calls and waits, the first backoff if a mock is slow).
const STEP_CEILING: Duration = Duration::from_secs(120);

/// Variables the controller binary must not inherit from the developer's shell: its own
/// settings and real cloud credentials (each rig sets what its cloud needs).
const ENV_REMOVE: &[&str] = &[
    "KUBE_LB_CLOUD",
    "KUBE_LB_CLOUD_CONFIG",
    "KUBE_LB_CLUSTER_NAME",
    "BCE_ACCESS_KEY_ID",
    "BCE_SECRET_ACCESS_KEY",
    "BCE_SESSION_TOKEN",
    "TENCENTCLOUD_SECRET_ID",
    "TENCENTCLOUD_SECRET_KEY",
    "TENCENTCLOUD_SESSION_TOKEN",
];

/// How `kube-lb controller` is run for one `--cloud` in the RBAC check: the overlay users
/// apply for that cloud, the flags and environment pointing it at the cloud's mock, the Nodes
/// of its cluster (YAML), and what must outlive the run (the mock, its cloud-config's dir).
struct CloudRig {
    overlay: &'static str,
    args: Vec<String>,
    env: Vec<(String, String)>,
    nodes: String,
    _keep: Vec<Box<dyn std::any::Any>>,
}

impl CloudRig {
    /// A rig for `overlay` running the binary with `args` on a cluster of `nodes`.
    fn new(overlay: &'static str, args: &[String], nodes: String) -> CloudRig {
        CloudRig {
            overlay,
            args: args.to_vec(),
            env: Vec::new(),
            nodes,
            _keep: Vec::new(),
        }
    }

    /// Keeps `value` alive until the rig is dropped.
    #[cfg_attr(
        not(any(
            feature = "aws",
            feature = "gcp",
            feature = "azure",
            feature = "openstack",
            feature = "tencent",
            feature = "baidu"
        )),
        allow(dead_code)
    )]
    fn keeping(mut self, value: impl std::any::Any) -> CloudRig {
        self._keep.push(Box::new(value));
        self
    }

    /// `--cloud=<cloud>` and `--cloud-config` naming `file`, written into a temp dir the rig
    /// keeps.
    #[cfg_attr(
        not(any(
            feature = "aws",
            feature = "gcp",
            feature = "azure",
            feature = "openstack",
            feature = "tencent",
            feature = "baidu"
        )),
        allow(dead_code)
    )]
    fn with_config(
        overlay: &'static str,
        cloud: &str,
        file: &str,
        config: String,
        nodes: String,
    ) -> CloudRig {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file);
        std::fs::write(&path, config).unwrap();
        let args = [
            format!("--cloud={cloud}"),
            format!("--cloud-config={}", path.display()),
        ];
        CloudRig::new(overlay, &args, nodes).keeping(dir)
    }
}

/// Ready Nodes `node-<i>` (YAML) at `addresses`, with `provider_id(i)` when given.
fn node_docs(addresses: &[&str], provider_id: impl Fn(usize) -> Option<String>) -> String {
    addresses
        .iter()
        .enumerate()
        .map(|(i, address)| {
            let spec = provider_id(i + 1)
                .map(|id| format!("spec: {{providerID: '{id}'}}\n"))
                .unwrap_or_default();
            format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: node-{}}}\n{spec}\
                 status:\n  conditions: [{{type: Ready, status: 'True'}}]\n  \
                 addresses: [{{type: InternalIP, address: {address}}}]\n",
                i + 1
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The Nodes of a `tests/fixtures/clouds` file (its Service left out).
#[cfg(any(feature = "gcp", feature = "azure"))]
fn fixture_nodes(name: &str) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/clouds")
            .join(name),
    )
    .unwrap();
    text.split("\n---\n")
        .filter(|doc| doc.contains("kind: Node"))
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// Starts `kube-lb controller` with `args`, logging to `log`, its environment cleared of
/// [`ENV_REMOVE`] and set to `env`.
fn spawn_controller(args: &[String], env: &[(String, String)], log: &Path) -> ChildGuard {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kube-lb"));
    for name in ENV_REMOVE {
        command.env_remove(name);
    }
    command
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .args(["--log", "info"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    ChildGuard(command.spawn().unwrap())
}

/// Runs `kube-lb controller` for `rig` through the recorder over two Services' whole lives
/// and asserts that it used exactly what the rig's overlay, as rendered, grants the
/// controller's ServiceAccount: nothing missing and nothing unused.
async fn controller_uses_exactly_its_overlays_rbac(rig: CloudRig) {
    let server = ApiServer::builder().start().await.unwrap();
    seed_pools(&server);
    server.apply_manifests(&rig.nodes).unwrap();
    let recorder = Recorder::start(server.url()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = recorder.kubeconfig(dir.path(), "controller.kubeconfig");
    let log = dir.path().join("controller.log");
    let mut args: Vec<String> = [
        "controller",
        "--leader-elect",
        "--metrics-addr=127.0.0.1:0",
        "--backoff-base=200ms",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    args.extend(rig.args.iter().cloned());
    let mut env = rig.env.clone();
    env.extend([
        ("POD_NAMESPACE".to_string(), "kube-lb-system".to_string()),
        ("POD_NAME".to_string(), "controller-0".to_string()),
    ]);
    let _controller = spawn_controller(&args, &env, &log);
    let wait = |what: &'static str| {
        let log = log.clone();
        move |done: bool, start: Instant| {
            assert!(
                done || start.elapsed() < STEP_CEILING,
                "{}: timed out waiting for {what}; controller log:\n{}",
                rig.overlay,
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            done
        }
    };

    // A full lifecycle: create, change (a second Ensuring event patches the event series),
    // retype to ClusterIP (release), and create then delete another (finalizer removal).
    let services: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    services
        .create(&PostParams::default(), &lb_service("web", 80))
        .await
        .unwrap();
    poll(wait("web to get an address"), || async {
        services.get("web").await.is_ok_and(|s| has_ingress(&s))
    })
    .await;
    let patch = json!({"spec": {"ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}});
    services
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    // One change only: a change and its undo in quick succession may reach the controller as
    // one unchanged Service, which it rightly leaves alone (no second Ensuring event).
    poll(wait("the event series to be patched"), || async {
        recorder
            .seen()
            .contains(&permission("events.k8s.io", "events", "patch"))
    })
    .await;
    // The leader renews its Lease every retry period (2 s by default).
    poll(wait("the Lease to be renewed"), || async {
        recorder
            .seen()
            .contains(&permission("coordination.k8s.io", "leases", "update"))
    })
    .await;
    // Retyped away from LoadBalancer: the load balancer is released and the finalizer goes
    // (the Service is read back before that). Then a second Service is deleted outright.
    let retype = json!({"spec": {"type": "ClusterIP"}});
    services
        .patch("web", &PatchParams::default(), &Patch::Merge(&retype))
        .await
        .unwrap();
    poll(wait("web's finalizer to go"), || async {
        services.get("web").await.is_ok_and(|s| {
            s.metadata.finalizers.as_ref().is_none_or(Vec::is_empty) && !has_ingress(&s)
        })
    })
    .await;
    services
        .create(&PostParams::default(), &lb_service("api", 81))
        .await
        .unwrap();
    poll(wait("api to get an address"), || async {
        services.get("api").await.is_ok_and(|s| has_ingress(&s))
    })
    .await;
    services
        .delete("api", &DeleteParams::default())
        .await
        .unwrap();
    poll(wait("api to be gone"), || async {
        matches!(services.get_opt("api").await, Ok(None))
    })
    .await;

    let granted = granted_in(&[rendered_overlay(rig.overlay)], "kube-lb-controller");
    let who = format!("the controller of overlays/{}", rig.overlay);
    assert_used_exactly(&recorder.requests(), &granted, &who, &[]);
    recorder.task.abort();
}

/// Polls `check` every 50 ms until `verdict(result, start)` (which fails the test once a
/// ceiling has passed) says it is done.
async fn poll<V, F, Fut>(verdict: V, mut check: F)
where
    V: Fn(bool, Instant) -> bool,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !verdict(check().await, start) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `local` provider reads IPPools and namespace labels: the local and bare-metal overlays
/// grant exactly that on top of the base, and the same to the controller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_rbac_is_exactly_what_the_controller_uses() {
    assert_eq!(
        granted_in(&[rendered_overlay("local")], "kube-lb-controller"),
        granted_in(&[rendered_overlay("bare-metal")], "kube-lb-controller"),
        "both overlays run the local provider"
    );
    let nodes = node_docs(&["127.0.0.1"], |_| None);
    controller_uses_exactly_its_overlays_rbac(CloudRig::new(
        "local",
        &["--cloud=local".to_string()],
        nodes,
    ))
    .await;
}

#[cfg(feature = "aws")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_rbac_on_aws_is_exactly_what_the_controller_uses() {
    use crate::cloud_fixtures::{aws_env, aws_node_docs, moto};
    let moto = moto().await;
    let network = moto.cluster_network("kubernetes", 2).await.unwrap();
    let nodes = aws_node_docs(&network.instances).join("---\n");
    let mut rig = CloudRig::new("aws", &["--cloud=aws".to_string()], nodes);
    rig.env = aws_env(&moto.endpoint());
    controller_uses_exactly_its_overlays_rbac(rig.keeping(moto)).await;
}

#[cfg(feature = "gcp")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_rbac_on_gcp_is_exactly_what_the_controller_uses() {
    use crate::provider_scenarios::scenarios::gcp::support::{TAG, gce_conf};
    let gce = crate::cloud_fixtures::gce().await;
    let conf = gce_conf(gce.project(), gce.url(), &format!("node-tags = {TAG}\n"));
    let rig = CloudRig::with_config("gcp", "gcp", "gce.conf", conf, fixture_nodes("gcp.yaml"));
    controller_uses_exactly_its_overlays_rbac(rig.keeping(gce)).await;
}

#[cfg(feature = "azure")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_rbac_on_azure_is_exactly_what_the_controller_uses() {
    use crate::provider_scenarios::scenarios::azure::support;
    let arm = crate::cloud_fixtures::arm().await;
    let config = support::config_json_for(&arm.url(), &arm.url());
    let rig = CloudRig::with_config(
        "azure",
        "azure",
        "azure.json",
        serde_json::to_string_pretty(&config).unwrap(),
        fixture_nodes("azure.yaml"),
    );
    controller_uses_exactly_its_overlays_rbac(rig.keeping(arm)).await;
}

#[cfg(feature = "openstack")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_rbac_on_openstack_is_exactly_what_the_controller_uses() {
    use crate::provider_scenarios::scenarios::openstack::support::cloud_conf;
    let cloud = kube_lb_mock_openstack::MockOpenStack::builder()
        .start()
        .await
        .unwrap();
    let rig = CloudRig::with_config(
        "openstack",
        "openstack",
        "cloud.conf",
        cloud_conf(&cloud, ""),
        node_docs(&["10.0.0.11", "10.0.0.12"], |_| None),
    );
    controller_uses_exactly_its_overlays_rbac(rig.keeping(cloud)).await;
}

#[cfg(feature = "tencent")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_rbac_on_tencent_is_exactly_what_the_controller_uses() {
    use crate::provider_scenarios::scenarios::tencent::support::{CLUSTER, cloud_config};
    let cloud = kube_lb_mock_tencent::MockTencent::builder()
        .start()
        .await
        .unwrap();
    let nodes = node_docs(&["10.0.0.11", "10.0.0.12"], |i| {
        Some(format!("qcloud:///800002/ins-0000000{i}"))
    });
    let mut rig = CloudRig::with_config(
        "tencent",
        "tencent",
        "tencent.json",
        cloud_config(&cloud),
        nodes,
    );
    rig.args.push(format!("--cluster-name={CLUSTER}"));
    controller_uses_exactly_its_overlays_rbac(rig.keeping(cloud)).await;
}

#[cfg(feature = "baidu")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_rbac_on_baidu_is_exactly_what_the_controller_uses() {
    use crate::provider_scenarios::scenarios::baidu::support::cloud_config;
    let cloud = kube_lb_mock_baidu::MockBaidu::builder()
        .start()
        .await
        .unwrap();
    let nodes = node_docs(&["192.168.0.101", "192.168.0.102"], |i| {
        Some(format!("cce://i-node{i:04}"))
    });
    let rig = CloudRig::with_config(
        "baidu",
        "baidu",
        "cloud-config.json",
        cloud_config(&cloud),
        nodes,
    );
    controller_uses_exactly_its_overlays_rbac(rig.keeping(cloud)).await;
}

/// The proxy runs as on a node, in a network namespace this test creates: its capture table,
/// rules and listeners land there, never on this machine's own network, and go with the
/// namespace even though the proxy is killed, not stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_rbac_is_exactly_what_the_proxy_uses() {
    use kube_lb_dataplane::l2::lab::{self, Namespaces};
    if !netns_lab_available() {
        return;
    }
    let mut namespaces = Namespaces::new("klbrbac");
    let node = namespaces.add("node").unwrap();
    let server = ApiServer::builder().start().await.unwrap();
    seed_cluster(&server).await;
    // The recorder answers on the node's loopback; it forwards from here to the API server.
    let listener = lab::in_netns(&node, || std::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap()
        .unwrap();
    let recorder = Recorder::serve_std(listener, server.url());
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = recorder.kubeconfig(dir.path(), "proxy.kubeconfig");
    let _proxy = ChildGuard(
        Command::new("ip")
            .args(["netns", "exec", &node, env!("CARGO_BIN_EXE_kube-lb")])
            .args([
                "proxy",
                "--node-name=n1",
                "--mode=userspace",
                "--healthz-addr=127.0.0.1:0",
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let granted = granted(&["deploy/base/rbac-proxy.yaml"], "kube-lb-proxy");
    // The proxy only reads; wait until it has started every watch it grants itself.
    wait_for("the proxy's watches", Duration::from_secs(60), || async {
        recorder.seen().iter().filter(|p| p.2 == "watch").count()
            >= granted.iter().filter(|p| p.2 == "watch").count()
    })
    .await;
    assert_used_exactly(&recorder.requests(), &granted, "the proxy", &[]);
    recorder.task.abort();
}

/// With `--l2-announce`, the proxy uses exactly the base grants plus
/// `deploy/components/l2-announce` (its Lease, the event naming the announcing node): run for
/// real on a node of a Layer-2 rig in network namespaces this test creates, the API server
/// reached over the rig's LAN through the recorder, the address on the LAN assigned to a
/// Service so the node announces it, then a clean stop (which deletes the Lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_l2_announce_rbac_is_exactly_base_plus_the_l2_component() {
    use kube_lb_dataplane::l2::lab::{self, L2Lab};
    if !netns_lab_available() {
        return;
    }
    let rig = L2Lab::new(1).unwrap();
    let server = ApiServer::builder().start().await.unwrap();
    seed_cluster(&server).await;
    let client = server.client().unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    services
        .create(&PostParams::default(), &lb_service("web", 80))
        .await
        .unwrap();
    services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.50"}]}}})),
        )
        .await
        .unwrap();
    // The recorder listens on the switch's address, inside the rig; it forwards from here.
    let listener = lab::in_netns(&rig.ns("sw"), || {
        std::net::TcpListener::bind(format!("{}:0", lab::API_ADDRESS))
    })
    .unwrap()
    .unwrap();
    let recorder = Recorder::serve_std(listener, server.url());
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = recorder.kubeconfig(dir.path(), "proxy.kubeconfig");
    let mut proxy = rig
        .node_command(
            1,
            Path::new(env!("CARGO_BIN_EXE_kube-lb")),
            &[
                "proxy",
                "--node-name=n1",
                "--mode=userspace",
                "--healthz-addr=127.0.0.1:0",
                "--l2-metrics-addr=127.0.0.1:0",
                "--l2-announce",
                "--l2-interface=eth0",
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let files = [
        "deploy/base/rbac-proxy.yaml",
        "deploy/components/l2-announce/rbac.yaml",
    ];
    let granted = granted(&files, "kube-lb-proxy");
    let lease_renewed = permission("coordination.k8s.io", "leases", "patch");
    let announced = permission("events.k8s.io", "events", "create");
    wait_for(
        "the proxy's watches, lease renewals and the announcing event",
        Duration::from_secs(60),
        || async {
            let seen = recorder.seen();
            seen.contains(&lease_renewed)
                && seen.contains(&announced)
                && seen.iter().filter(|p| p.2 == "watch").count()
                    >= granted.iter().filter(|p| p.2 == "watch").count()
        },
    )
    .await;
    // A clean stop hands the addresses over at once by deleting the Lease.
    let stopped = Command::new("kill")
        .args(["-TERM", &proxy.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let lease_released = permission("coordination.k8s.io", "leases", "delete");
    wait_for(
        "the lease released on SIGTERM",
        Duration::from_secs(30),
        || async { recorder.seen().contains(&lease_released) },
    )
    .await;
    let _ = proxy.wait();
    // `events patch` is granted for a repeated event (the same node taking the same address
    // again), which one short run does not produce; everything else must be used.
    assert_used_exactly(
        &recorder.requests(),
        &granted,
        "the proxy with --l2-announce",
        &[permission("events.k8s.io", "events", "patch")],
    );
    recorder.task.abort();
}

/// The BGP component (`deploy/components/bgp`, in `overlays/bare-metal`) grants the proxy its
/// BGP configuration and nothing more: kube-lb's three kinds and the IPPools they select,
/// MetalLB's three kinds read-only (no status write there: kube-lb never writes to them), the
/// status of kube-lb's kinds, events, and one Secret by name, through a Role in kube-lb-system:
/// a ClusterRole, or a rule without `resourceNames`, would let every node's proxy read other
/// Secrets. No other overlay grants any of it. (Which grants the running speaker uses is
/// checked like `--l2-announce`'s once the speaker exists.)
#[test]
fn the_bgp_component_grants_the_proxy_its_configuration_and_one_secret() {
    let bgp = granted(&["deploy/components/bgp/rbac.yaml"], "kube-lb-proxy");
    let mut want = BTreeSet::new();
    for resource in ["bgppeers", "bgpadvertisements", "bfdprofiles", "ippools"] {
        for verb in ["get", "list", "watch"] {
            want.insert(permission("kube-lb.io", resource, verb));
        }
    }
    for resource in ["bgppeers", "bgpadvertisements", "bfdprofiles"] {
        want.insert(permission(
            "kube-lb.io",
            &format!("{resource}/status"),
            "patch",
        ));
        for verb in ["get", "list", "watch"] {
            want.insert(permission("metallb.io", resource, verb));
        }
    }
    want.insert(permission("events.k8s.io", "events", "create"));
    want.insert(permission("events.k8s.io", "events", "patch"));
    want.insert(permission("", "secrets#kube-lb-bgp-passwords", "get"));
    assert_eq!(bgp, want);

    // The overlay renders exactly the base, Layer-2 and BGP grants for the proxy.
    let rendered = rendered_overlay("bare-metal");
    assert_eq!(
        granted_in(std::slice::from_ref(&rendered), "kube-lb-proxy"),
        granted(
            &[
                "deploy/base/rbac-proxy.yaml",
                "deploy/components/l2-announce/rbac.yaml",
                "deploy/components/bgp/rbac.yaml",
            ],
            "kube-lb-proxy"
        )
    );
    // Every rule naming Secrets is that one Role's, in kube-lb-system, bound there.
    let mut secret_rules = 0;
    let mut bound_in = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&rendered) {
        let obj: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        if obj["kind"] == "RoleBinding" && obj["roleRef"]["name"] == "kube-lb-proxy-bgp-passwords" {
            bound_in.push(obj["metadata"]["namespace"].clone());
        }
        for rule in obj["rules"].as_array().into_iter().flatten() {
            let names_secrets = rule["resources"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r == "secrets"));
            if names_secrets {
                secret_rules += 1;
                assert_eq!(obj["kind"], "Role", "{obj}");
                assert_eq!(obj["metadata"]["namespace"], "kube-lb-system", "{obj}");
                assert_eq!(
                    rule["resourceNames"],
                    json!(["kube-lb-bgp-passwords"]),
                    "{obj}"
                );
                assert_eq!(rule["verbs"], json!(["get"]), "{obj}");
            }
        }
    }
    assert_eq!(secret_rules, 1);
    assert_eq!(bound_in, [json!("kube-lb-system")]);

    // Nowhere else.
    let overlays = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/overlays");
    for entry in std::fs::read_dir(overlays).unwrap() {
        let overlay = entry.unwrap().file_name().into_string().unwrap();
        if overlay == "bare-metal" {
            continue;
        }
        let granted = granted_in(&[rendered_overlay(&overlay)], "kube-lb-proxy");
        let bgp_only: Vec<_> = granted
            .iter()
            .filter(|p| {
                p.0 == "metallb.io"
                    || p.1.starts_with("secrets")
                    || ["bgppeers", "bgpadvertisements", "bfdprofiles"]
                        .iter()
                        .any(|r| p.1.starts_with(r))
            })
            .collect();
        assert!(
            bgp_only.is_empty(),
            "overlays/{overlay} grants {bgp_only:?}"
        );
    }
}

/// The bare-metal overlay's CustomResourceDefinitions, as kustomize renders them (the
/// IPPool's and the BGP kinds'), are taken by the API server, and the BGP kinds are then
/// served: objects of each validate and are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bare_metal_overlays_crds_serve_the_bgp_kinds() {
    let server = ApiServer::builder().start().await.unwrap();
    let rendered = rendered_overlay("bare-metal");
    let mut crds = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&rendered) {
        let obj: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        if obj["kind"] == "CustomResourceDefinition" {
            crds.push(obj["metadata"]["name"].as_str().unwrap().to_string());
            server
                .apply_manifests(&serde_json::to_string(&obj).unwrap())
                .unwrap();
        }
    }
    crds.sort();
    assert_eq!(
        crds,
        [
            "bfdprofiles.kube-lb.io",
            "bgpadvertisements.kube-lb.io",
            "bgppeers.kube-lb.io",
            "ippools.kube-lb.io"
        ]
    );
    server
        .apply_manifests(
            "apiVersion: kube-lb.io/v1alpha1\nkind: BGPPeer\nmetadata: {name: tor}\n\
             spec: {myASN: 64512, peerASN: 64513, peerAddress: 192.0.2.1}\n---\n\
             apiVersion: kube-lb.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: all}\n\
             spec: {}\n---\n\
             apiVersion: kube-lb.io/v1alpha1\nkind: BFDProfile\nmetadata: {name: fast}\n\
             spec: {receiveInterval: 100}\n",
        )
        .unwrap();
    for (kind, name) in [
        ("BGPPeer", "tor"),
        ("BGPAdvertisement", "all"),
        ("BFDProfile", "fast"),
    ] {
        assert!(
            server
                .get_value("kube-lb.io/v1alpha1", kind, None, name)
                .is_some(),
            "{kind} {name}"
        );
    }
}
