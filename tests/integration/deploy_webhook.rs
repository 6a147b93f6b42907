//! `deploy/components/webhook/` against the code and the binary: every cloud overlay rendered
//! with the component (beside it, as the component's README says) gives a
//! ValidatingWebhookConfiguration that calls the path `src/webhook/server.rs` serves, can never
//! block an apply (failurePolicy Ignore, a short timeout, no side effects) and speaks
//! AdmissionReview v1; a Deployment whose flags are ones `kube-lb webhook --help` lists, whose
//! certificate files are where the Secret cert-manager fills is mounted, and which runs the
//! controller's image and `--cloud`; and a ServiceAccount without a token and without a single
//! binding. Last, the rendered container is run as the kubelet would run it (its args and env,
//! the Secret's files in a temporary directory), probed as its probes say and sent a review on
//! the configuration's path, with a client that trusts only the certificate and dials the
//! Service's DNS name; and the configuration and the Service are created in the embedded API
//! server, which validates them as kube-apiserver does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::monitoring::{kubectl, kustomize, relative};

const COMPONENT: &str = "deploy/components/webhook";
const WEBHOOK: &str = "kube-lb-webhook";
/// The Secret the component mounts (`kubernetes.io/tls`: `tls.crt`, `tls.key`).
const SECRET: &str = "kube-lb-webhook-tls";

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `VALIDATE_PATH` as `src/webhook/server.rs` defines it.
fn validate_path() -> String {
    let source = std::fs::read_to_string(repo_file("src/webhook/server.rs")).unwrap();
    let line = source
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("pub const VALIDATE_PATH: &str = ")
        })
        .expect("src/webhook/server.rs defines VALIDATE_PATH");
    let literal = line
        .split('"')
        .nth(1)
        .expect("VALIDATE_PATH is a string literal");
    assert!(literal.starts_with('/'), "{line}");
    literal.to_string()
}

/// The long flags `kube-lb webhook --help` lists, and the values its `--cloud` accepts.
fn help() -> (BTreeSet<String>, BTreeSet<String>) {
    let out = Command::new(env!("CARGO_BIN_EXE_kube-lb"))
        .args(["webhook", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut flags = BTreeSet::new();
    let mut clouds = BTreeSet::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.starts_with('-') && !trimmed.starts_with("- ") && indent <= 6 {
            if let Some(flag) = trimmed.split([' ', ',', '=']).find(|t| t.starts_with("--")) {
                flags.insert(flag.to_string());
                current = flag.to_string();
            }
        } else if current == "--cloud"
            && let Some(value) = trimmed.strip_prefix("- ").and_then(|v| v.split(':').next())
        {
            clouds.insert(value.to_string());
        }
    }
    assert!(flags.contains("--tls-cert-file"), "{text}");
    assert!(clouds.contains("aws") && clouds.contains("local"), "{text}");
    (flags, clouds)
}

/// The shipped overlays that install kube-lb (those built on the base); the monitoring overlay
/// renders only its own component.
fn cloud_overlays() -> Vec<String> {
    let mut overlays: Vec<String> = std::fs::read_dir(repo_file("deploy/overlays"))
        .unwrap()
        .flatten()
        .filter(|entry| {
            std::fs::read_to_string(entry.path().join("kustomization.yaml"))
                .is_ok_and(|k| k.contains("../../base"))
        })
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    overlays.sort();
    overlays
}

/// What a user's kustomization renders: `overlay` as a resource, the component beside it.
fn render(kubectl: &str, overlay: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let overlay_dir = relative(
        dir.path(),
        &repo_file(&format!("deploy/overlays/{overlay}")),
    );
    let component = relative(dir.path(), &repo_file(COMPONENT));
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources:\n  - {}\ncomponents:\n  - {}\n",
            overlay_dir.display(),
            component.display()
        ),
    )
    .unwrap();
    kustomize(kubectl, dir.path())
}

/// The one object of `kind` named `name`.
fn one<'a>(objects: &'a [Value], kind: &str, name: &str, what: &str) -> &'a Value {
    let found: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{what}: {kind} {name} rendered {} times",
        found.len()
    );
    found[0]
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

/// A container's args as flag → value (`--flag=value` or `--flag value`; a bare flag maps to
/// ""), after the subcommand.
fn flags_of(args: &[&str]) -> BTreeMap<String, String> {
    let mut flags = BTreeMap::new();
    let mut rest = args.iter().peekable();
    while let Some(arg) = rest.next() {
        let Some(flag) = arg.strip_prefix("--") else {
            panic!("{arg} in {args:?} is not a flag");
        };
        let (name, value) = match flag.split_once('=') {
            Some((name, value)) => (name.to_string(), value.to_string()),
            None => match rest.next_if(|next| !next.starts_with("--")) {
                Some(value) => (flag.to_string(), value.to_string()),
                None => (flag.to_string(), String::new()),
            },
        };
        assert!(
            flags.insert(format!("--{name}"), value).is_none(),
            "--{name} given twice in {args:?}"
        );
    }
    flags
}

/// A named or numbered container port as a number.
fn port_number(container: &Value, port: &Value) -> u64 {
    if let Some(n) = port.as_u64() {
        return n;
    }
    let name = port.as_str().unwrap();
    container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no container port named {name}"))["containerPort"]
        .as_u64()
        .unwrap()
}

/// The value of a plain `env` entry.
fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

fn container<'a>(deployment: &'a Value, name: &str) -> &'a Value {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}: {deployment}"))
}

/// Everything the rendering of `overlay` + component must hold; returns the webhook's cloud.
fn check(
    overlay: &str,
    objects: &[Value],
    path: &str,
    flags: &BTreeSet<String>,
    clouds: &BTreeSet<String>,
) -> String {
    let what = format!("overlays/{overlay} + {COMPONENT}");
    let what = what.as_str();

    // The configuration kube-apiserver reads.
    let config = one(objects, "ValidatingWebhookConfiguration", WEBHOOK, what);
    let webhooks = config["webhooks"].as_array().unwrap();
    assert_eq!(webhooks.len(), 1, "{what}: {config}");
    let hook = &webhooks[0];
    assert_eq!(hook["name"], "services.webhook.kube-lb.io", "{what}");
    assert_eq!(
        hook["failurePolicy"], "Ignore",
        "{what}: must never block an apply"
    );
    let timeout = hook["timeoutSeconds"].as_u64().expect("timeoutSeconds set");
    assert!(
        (1..=10).contains(&timeout),
        "{what}: timeoutSeconds {timeout}"
    );
    assert_eq!(hook["sideEffects"], "None", "{what}");
    assert!(
        strings(&hook["admissionReviewVersions"]).contains(&"v1"),
        "{what}: {hook}"
    );
    assert_eq!(hook["matchPolicy"], "Equivalent", "{what}");
    assert_eq!(
        hook["rules"],
        json!([{
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["services"],
            "scope": "Namespaced",
        }]),
        "{what}"
    );
    assert_eq!(
        hook["namespaceSelector"],
        json!({"matchExpressions": [{
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system"],
        }]}),
        "{what}"
    );
    // Every Service, whatever its labels.
    assert!(
        hook.get("objectSelector").is_none_or(|s| *s == json!({})),
        "{what}: {hook}"
    );
    let client = &hook["clientConfig"];
    assert!(client.get("url").is_none(), "{what}: {client}");
    assert_eq!(
        client["service"]["path"], path,
        "{what}: not the path the server serves"
    );

    // The Service it calls, and the Pods behind it.
    let namespace = client["service"]["namespace"].as_str().unwrap();
    let service_name = client["service"]["name"].as_str().unwrap();
    let service = one(objects, "Service", service_name, what);
    assert_eq!(service["metadata"]["namespace"], namespace, "{what}");
    let service_port = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == client["service"]["port"])
        .unwrap_or_else(|| {
            panic!(
                "{what}: the Service has no port {}",
                client["service"]["port"]
            )
        });
    assert_eq!(service_port["port"], 443, "{what}");
    let deployment = one(objects, "Deployment", WEBHOOK, what);
    assert_eq!(deployment["metadata"]["namespace"], namespace, "{what}");
    let pod = &deployment["spec"]["template"];
    let labels = pod["metadata"]["labels"].as_object().unwrap();
    for (key, value) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(
            labels.get(key),
            Some(value),
            "{what}: the Service selects no webhook Pod"
        );
    }
    assert!(
        deployment["spec"]["replicas"].as_u64().unwrap() >= 2,
        "{what}"
    );
    let spread = &pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        [0]["podAffinityTerm"];
    assert_eq!(
        spread["topologyKey"], "kubernetes.io/hostname",
        "{what}: {pod}"
    );
    let budget = one(objects, "PodDisruptionBudget", WEBHOOK, what);
    assert_eq!(budget["spec"]["minAvailable"], 1, "{what}");
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"], deployment["spec"]["selector"]["matchLabels"],
        "{what}"
    );

    // The container: flags the binary has, listening where the Service sends.
    let webhook = container(deployment, "webhook");
    let args = strings(&webhook["args"]);
    assert_eq!(args.first(), Some(&"webhook"), "{what}: {args:?}");
    let given = flags_of(&args[1..]);
    for flag in given.keys() {
        assert!(
            flags.contains(flag),
            "{what}: {flag} is not a flag of `kube-lb webhook --help` ({flags:?})"
        );
    }
    assert!(
        !given.contains_key("--self-signed-for"),
        "{what}: {given:?}"
    );
    let target = port_number(webhook, &service_port["targetPort"]);
    let listen: std::net::SocketAddr = given["--listen"].parse().unwrap();
    assert_eq!(
        u64::from(listen.port()),
        target,
        "{what}: the Service sends elsewhere"
    );
    for probe in ["readinessProbe", "livenessProbe"] {
        let get = &webhook[probe]["httpGet"];
        assert_eq!(get["scheme"], "HTTPS", "{what}: {probe}");
        assert_eq!(get["path"], "/healthz", "{what}: {probe}");
        assert_eq!(
            port_number(webhook, &get["port"]),
            target,
            "{what}: {probe}"
        );
    }

    // The certificate: the Secret cert-manager fills, mounted read-only where the flags read.
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    let volume = volumes
        .iter()
        .find(|v| v["secret"]["secretName"] == SECRET)
        .unwrap_or_else(|| panic!("{what}: no volume of the Secret {SECRET}: {volumes:?}"));
    let mount = webhook["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .unwrap_or_else(|| panic!("{what}: the Secret's volume is not mounted"));
    assert_eq!(mount["readOnly"], true, "{what}");
    let mounted = Path::new(mount["mountPath"].as_str().unwrap());
    assert_eq!(
        Path::new(&given["--tls-cert-file"]),
        mounted.join("tls.crt"),
        "{what}"
    );
    assert_eq!(
        Path::new(&given["--tls-private-key-file"]),
        mounted.join("tls.key"),
        "{what}"
    );
    let certificate = one(objects, "Certificate", WEBHOOK, what);
    assert_eq!(certificate["metadata"]["namespace"], namespace, "{what}");
    assert_eq!(certificate["spec"]["secretName"], SECRET, "{what}");
    let dns = format!("{service_name}.{namespace}.svc");
    assert!(
        strings(&certificate["spec"]["dnsNames"]).contains(&dns.as_str()),
        "{what}: the certificate is not for {dns}"
    );
    let issuer = &certificate["spec"]["issuerRef"];
    assert_eq!(issuer["kind"], "Issuer", "{what}");
    let issuer = one(objects, "Issuer", issuer["name"].as_str().unwrap(), what);
    assert_eq!(issuer["metadata"]["namespace"], namespace, "{what}");
    assert_eq!(
        config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!(
            "{namespace}/{}",
            certificate["metadata"]["name"].as_str().unwrap()
        ),
        "{what}: cert-manager would not fill caBundle"
    );

    // Least privilege: no token, no binding, no capability, no root.
    let account = pod["spec"]["serviceAccountName"].as_str().unwrap();
    assert_eq!(account, WEBHOOK, "{what}: its own ServiceAccount");
    let service_account = one(objects, "ServiceAccount", account, what);
    assert_eq!(
        service_account["automountServiceAccountToken"], false,
        "{what}"
    );
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false, "{what}");
    for binding in objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
    {
        for subject in binding["subjects"].as_array().into_iter().flatten() {
            let names_it = match subject["kind"].as_str() {
                Some("ServiceAccount") => subject["name"] == account,
                // Groups holding every service account (of the namespace).
                Some("Group") => [
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{namespace}"),
                    "system:authenticated".to_string(),
                ]
                .iter()
                .any(|group| subject["name"] == group.as_str()),
                _ => false,
            };
            assert!(
                !names_it,
                "{what}: {} {} grants {account} permissions",
                binding["kind"], binding["metadata"]["name"]
            );
        }
    }
    let pod_security = &pod["spec"]["securityContext"];
    assert_eq!(pod_security["runAsNonRoot"], true, "{what}");
    let security = &webhook["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(security["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]), "{what}");
    assert!(security["capabilities"].get("add").is_none(), "{what}");
    assert!(
        security.get("privileged").is_none_or(|p| p == false),
        "{what}"
    );
    assert!(
        pod["spec"].get("hostNetwork").is_none_or(|h| h == false),
        "{what}"
    );
    let requests = &webhook["resources"]["requests"];
    assert!(
        requests["cpu"].is_string() && requests["memory"].is_string(),
        "{what}"
    );

    // The controller's image and cloud, as the overlay rendered them.
    let controller = container(
        one(objects, "Deployment", "kube-lb-controller", what),
        "controller",
    );
    assert_eq!(webhook["image"], controller["image"], "{what}");
    assert_eq!(given["--cloud"], "$(KUBE_LB_CLOUD)", "{what}");
    let cloud = env_value(webhook, "KUBE_LB_CLOUD").expect("KUBE_LB_CLOUD in the env");
    assert_eq!(
        Some(cloud),
        env_value(controller, "KUBE_LB_CLOUD"),
        "{what}: the webhook judges another cloud than the controller runs"
    );
    assert!(
        clouds.contains(cloud),
        "{what}: --cloud {cloud} is not one of {clouds:?}"
    );
    cloud.to_string()
}

#[test]
fn every_cloud_overlay_with_the_webhook_component_renders_a_safe_webhook_the_binary_serves() {
    let Some(kubectl) = kubectl() else {
        return;
    };
    let path = validate_path();
    let (flags, clouds) = help();
    let overlays = cloud_overlays();
    assert!(overlays.len() >= 8, "{overlays:?}");
    let mut seen = BTreeSet::new();
    for overlay in &overlays {
        let objects = render(kubectl, overlay);
        seen.insert(check(overlay, &objects, &path, &flags, &clouds));
    }
    // The cloud follows each overlay's patch of the controller, not the base's default.
    assert!(
        seen.contains("aws") && seen.contains("local") && seen.len() >= 7,
        "{seen:?}"
    );
}

/// The webhook, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `$(NAME)` in `arg` replaced with `env`'s values, as the kubelet expands container args.
fn expand(arg: &str, env: &[(String, String)]) -> String {
    env.iter().fold(arg.to_string(), |arg, (name, value)| {
        arg.replace(&format!("$({name})"), value)
    })
}

#[tokio::test]
async fn the_rendered_webhook_container_serves_its_probes_and_the_configured_path() {
    let Some(kubectl) = kubectl() else {
        return;
    };
    let objects = render(kubectl, "aws");
    let what = "overlays/aws + the component";
    let deployment = one(&objects, "Deployment", WEBHOOK, what);
    let webhook = container(deployment, "webhook");
    let config = one(&objects, "ValidatingWebhookConfiguration", WEBHOOK, what);
    let client_config = &config["webhooks"][0]["clientConfig"]["service"];
    let dns = format!(
        "{}.{}.svc",
        client_config["name"].as_str().unwrap(),
        client_config["namespace"].as_str().unwrap()
    );

    // The Secret's files, as cert-manager would issue them for the Service's name.
    let dir = tempfile::tempdir().unwrap();
    let made = kube_lb::webhook::tls::self_signed(std::slice::from_ref(&dns)).unwrap();
    std::fs::write(dir.path().join("tls.crt"), &made.cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &made.key_pem).unwrap();
    let mount = webhook["volumeMounts"][0]["mountPath"].as_str().unwrap();

    // The container's args and env, the mount moved to the temporary directory and the
    // listener to a free loopback port.
    let env: Vec<(String, String)> = webhook["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let args: Vec<String> = strings(&webhook["args"])
        .into_iter()
        .map(|arg| {
            let arg = expand(arg, &env).replace(mount, &dir.path().display().to_string());
            if arg.starts_with("--listen") {
                format!("--listen=127.0.0.1:{port}")
            } else {
                arg
            }
        })
        .collect();
    let log = dir.path().join("webhook.log");
    let _webhook = Running(
        Command::new(env!("CARGO_BIN_EXE_kube-lb"))
            .env_clear()
            .envs(env.iter().cloned())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );

    // Probed as the kubelet would, until ready.
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(made.cert_pem.as_bytes()).unwrap())
        .resolve(&dns, ([127, 0, 0, 1], port).into())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let probe = &webhook["readinessProbe"]["httpGet"];
    let probe_url = format!(
        "{}://{dns}:{port}{}",
        probe["scheme"].as_str().unwrap().to_lowercase(),
        probe["path"].as_str().unwrap()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if client
            .get(&probe_url)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{probe_url} did not answer within 30 s: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A review on the configured path, of a Service with an AWS annotation error: judged as
    // AWS (the overlay's cloud), so the warning names the annotation.
    let interval = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval";
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "6a1f8a4e-1c1c-4d4d-9e9e-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Service"},
            "resource": {"group": "", "version": "v1", "resource": "services"},
            "operation": "CREATE",
            "namespace": "default",
            "name": "web",
            "object": {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "default", "annotations": {interval: "2"}},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}
            }
        }
    });
    let url = format!(
        "https://{dns}:{port}{}",
        client_config["path"].as_str().unwrap()
    );
    let answer: Value = client
        .post(&url)
        .json(&review)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    let response = &answer["response"];
    assert_eq!(response["uid"], review["request"]["uid"], "{answer}");
    assert_eq!(
        response["allowed"], true,
        "{answer}: the component only warns"
    );
    let warnings = strings(&response["warnings"]);
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with(&format!("metadata.annotations[{interval}]"))),
        "{answer}"
    );
}

/// The configuration and the Service as an API server validates them (the embedded server
/// validates both as kube-apiserver does): accepted as rendered, stored with the fields the
/// checks above read, and refused when the timeout is past kube-apiserver's 30 s limit — so the
/// acceptance is a real check.
#[tokio::test]
async fn the_rendered_configuration_and_service_pass_api_server_validation() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::api::core::v1::{Namespace, Service};
    use kube::api::{Api, PostParams};

    let Some(kubectl) = kubectl() else {
        return;
    };
    let objects = render(kubectl, "aws");
    let what = "overlays/aws + the component";
    let server = kube_lb_apiserver::ApiServer::builder()
        .start()
        .await
        .unwrap();
    let client = server.client().unwrap();
    let post = PostParams::default();

    let namespace: Namespace =
        serde_json::from_value(one(&objects, "Namespace", "kube-lb-system", what).clone()).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&post, &namespace)
        .await
        .unwrap();
    let service: Service =
        serde_json::from_value(one(&objects, "Service", WEBHOOK, what).clone()).unwrap();
    Api::<Service>::namespaced(client.clone(), "kube-lb-system")
        .create(&post, &service)
        .await
        .unwrap_or_else(|e| panic!("{what}: the Service is refused: {e}"));

    let rendered = one(&objects, "ValidatingWebhookConfiguration", WEBHOOK, what).clone();
    let configs = Api::<ValidatingWebhookConfiguration>::all(client);
    let mut too_slow = rendered.clone();
    too_slow["metadata"]["name"] = json!("kube-lb-webhook-too-slow");
    too_slow["webhooks"][0]["timeoutSeconds"] = json!(31);
    let refused = configs
        .create(&post, &serde_json::from_value(too_slow).unwrap())
        .await
        .expect_err("a 31 s timeout is refused");
    assert!(
        matches!(&refused, kube::Error::Api(status) if status.code == 422),
        "{refused:?}"
    );

    let stored = configs
        .create(&post, &serde_json::from_value(rendered.clone()).unwrap())
        .await
        .unwrap_or_else(|e| panic!("{what}: the ValidatingWebhookConfiguration is refused: {e}"));
    let stored = serde_json::to_value(&stored).unwrap();
    let hook = &stored["webhooks"][0];
    for field in [
        "name",
        "clientConfig",
        "rules",
        "failurePolicy",
        "timeoutSeconds",
        "sideEffects",
        "admissionReviewVersions",
        "matchPolicy",
        "namespaceSelector",
    ] {
        assert_eq!(
            hook[field], rendered["webhooks"][0][field],
            "{what}: {field} changed when stored"
        );
    }
}
