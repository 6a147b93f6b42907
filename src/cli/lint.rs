//! `kube-lb lint`: parse Service manifests offline with the same [`kube_lb_annotations::parse`]
//! the controller uses, and print the resolved load-balancer spec, every warning and every error.
//!
//! Exit status: 0 when every LoadBalancer Service parses, 1 when any object has an error,
//! 2 when a file cannot be read or is not valid YAML/JSON (this wins over 1).
//!
//! One judgement with the controller: each object goes through [`manifests::service_object`]
//! (the same step `kube-lb reconcile` applies before the API server sees the object) and then
//! [`kube_lb_annotations::parse`], which the controller calls on the Service it watches. Inputs
//! are read within the limits of [`manifests`] (size, nesting, alias expansion), and one bad
//! object is reported on its own, naming the field path, without hiding the others.
//!
//! What else decides the controller's verdict is taken from the controller's own code, not
//! restated here: whether it handles a Service's `spec.loadBalancerClass`
//! ([`ControllerConfig::handles_class`], with `--load-balancer-class` and `--default-class` as
//! the controller reads them), and for `--cloud local` the address the `local` provider would
//! give: its `plan_ensure` over the `--local-pool` ranges and the `IPPool`s (with the labels of
//! the Namespaces) found among the inputs. A user error there is a lint error in the
//! provider's words; an environment error (the controller keeps the Service pending and
//! retries when the pools change) is a warning.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Service;
use kube::api::DynamicObject;
use kube_lb_annotations::{Cloud, LoadBalancerSpec};
use kube_lb_provider_core::{CallCounter, LoadBalancerProvider};
use kube_lb_provider_local::{DEFAULT_POOL, IpRange, LocalProvider, ippool};

use serde::Serialize;
use serde_json::Value;

use crate::controller::ControllerConfig;
use crate::manifests;

/// Arguments of `kube-lb lint`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 all LoadBalancer Services valid, 1 at least one object \
has errors, 2 a file could not be read or parsed as YAML/JSON.\n\nExamples:\n  kube-lb lint -f \
examples/\n  kube-lb lint -f examples/aws --cloud aws\n  kubectl get svc -A -o yaml | kube-lb lint \
-f - --cloud aws -o json\n  kube-lb lint -f svc.yaml --local-pool 192.168.10.0/24,192.168.11.5-192.168.11.9\n  \
kubectl get svc,ippools,namespaces -A -o yaml | kube-lb lint -f -"
)]
pub struct Args {
    /// Manifest file or directory to read; repeatable. Directories are searched recursively for
    /// *.yaml, *.yml and *.json. `-` reads standard input. Files may hold several YAML documents
    /// and `kind: List` objects.
    #[arg(
        short = 'f',
        long = "filename",
        required = true,
        value_name = "FILE|DIR|-"
    )]
    pub files: Vec<String>,

    /// Which cloud's annotations to interpret. `local` (the default) is kube-lb's embedded
    /// provider: its address-pool annotations (`kube-lb.io/load-balancer-ips`,
    /// `kube-lb.io/address-pool`, `kube-lb.io/allow-shared-ip`, MetalLB's `metallb.io/*` as
    /// aliases with a warning) are checked, and cloud annotations are reported as having no
    /// effect.
    #[arg(long, value_enum, default_value_t = CloudArg::Local, env = "KUBE_LB_CLOUD")]
    pub cloud: CloudArg,

    /// Output format of the per-object reports on stdout.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,

    /// Address ranges of the `local` provider while no `IPPool` is given (as `controller
    /// --local-pool`): CIDRs or FIRST-LAST, comma separated or repeated. `IPPool` objects
    /// (kube-lb.io) among the `-f` inputs replace them, as in the controller. Only with
    /// `--cloud local`.
    #[arg(
        long,
        env = "KUBE_LB_LOCAL_POOL",
        value_delimiter = ',',
        default_value = DEFAULT_POOL,
        value_name = "CIDR|RANGE"
    )]
    pub local_pool: Vec<IpRange>,

    /// The `spec.loadBalancerClass` the controller handles (as `controller
    /// --load-balancer-class`); Services of any other class are reported as not handled.
    #[arg(long, env = "KUBE_LB_LOAD_BALANCER_CLASS")]
    pub load_balancer_class: Option<String>,

    /// Whether Services without `spec.loadBalancerClass` are handled too; defaults as for
    /// `controller`: true without `--load-balancer-class`, false with it.
    #[arg(long, env = "KUBE_LB_DEFAULT_CLASS")]
    pub default_class: Option<bool>,
}

/// `--cloud` values (one per [`Cloud`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CloudArg {
    /// kube-lb's embedded provider (addresses from IPPools or a local pool; `kube-lb.io/*`
    /// and MetalLB's `metallb.io/*` address annotations).
    Local,
    /// AWS Classic ELB / NLB (`service.beta.kubernetes.io/aws-load-balancer-*`).
    Aws,
    /// Google Cloud L4 (`cloud.google.com/*`, `networking.gke.io/*`).
    Gcp,
    /// Azure Standard LB (`service.beta.kubernetes.io/azure-*`).
    Azure,
    /// OpenStack Octavia (`loadbalancer.openstack.org/*`).
    Openstack,
    /// Tencent TKE CLB (`service.kubernetes.io/qcloud-*`, …).
    Tencent,
    /// Baidu CCE BLB (`service.beta.kubernetes.io/cce-*`).
    Baidu,
}

impl From<CloudArg> for Cloud {
    fn from(arg: CloudArg) -> Cloud {
        match arg {
            CloudArg::Local => Cloud::Local,
            CloudArg::Aws => Cloud::Aws,
            CloudArg::Gcp => Cloud::Gcp,
            CloudArg::Azure => Cloud::Azure,
            CloudArg::Openstack => Cloud::Openstack,
            CloudArg::Tencent => Cloud::Tencent,
            CloudArg::Baidu => Cloud::Baidu,
        }
    }
}

/// `-o` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One YAML document per object.
    Yaml,
    /// One JSON array of all reports.
    Json,
}

/// What happened to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// A LoadBalancer Service that parsed (possibly with warnings).
    Ok,
    /// An object with errors.
    Invalid,
    /// Not a LoadBalancer Service: nothing to check.
    Skipped,
}

/// The lint result for one object.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `path#document` (1-based), with `/items[i]` for members of a `kind: List`.
    pub source: String,
    /// `Kind namespace/name`.
    pub object: String,
    /// Outcome.
    pub status: Status,
    /// Why it was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The resolved spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<LoadBalancerSpec>,
    /// One line per warning.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// One line per error.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// A file that could not be read or parsed (exit status 2).
#[derive(Debug)]
pub struct InputError {
    /// Which input.
    pub source: String,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.source, self.message)
    }
}

/// What lint judges a Service with besides its cloud: the controller's settings that decide a
/// verdict (which classes it handles; for `local`, the address pools).
#[derive(Debug)]
pub struct Judge {
    cloud: Cloud,
    config: ControllerConfig,
    local: Option<LocalJudge>,
}

/// The `local` provider as the controller would run it, asked what it would do.
#[derive(Debug)]
struct LocalJudge {
    provider: Arc<LocalProvider>,
    /// `plan_ensure` is async; it makes no I/O, so a small runtime drives it to the end.
    runtime: tokio::runtime::Runtime,
    /// By name: a later object of the same name replaces an earlier one.
    pools: BTreeMap<String, Arc<DynamicObject>>,
    namespaces: HashMap<String, BTreeMap<String, String>>,
}

impl Judge {
    /// The controller's defaults: the unclassed Services, and for `local` the default pool.
    pub fn new(cloud: Cloud) -> anyhow::Result<Judge> {
        let pool = DEFAULT_POOL
            .parse::<IpRange>()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Judge::with(cloud, vec![pool], None, None)
    }

    /// A judge with `local_pool` as the `local` provider's fallback ranges and the class flags
    /// read as `controller` reads them.
    pub fn with(
        cloud: Cloud,
        local_pool: Vec<IpRange>,
        load_balancer_class: Option<String>,
        default_class: Option<bool>,
    ) -> anyhow::Result<Judge> {
        let mut config = ControllerConfig::new(cloud);
        config.default_class = default_class.unwrap_or(load_balancer_class.is_none());
        config.load_balancer_class = load_balancer_class;
        let local = match cloud {
            Cloud::Local => {
                let built = crate::cloud::local_provider(local_pool, CallCounter::new())?;
                let provider = built
                    .local
                    .context("the local provider is not a LocalProvider")?;
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .context("starting the runtime that asks the local provider")?;
                Some(LocalJudge {
                    provider,
                    runtime,
                    pools: BTreeMap::new(),
                    namespaces: HashMap::new(),
                })
            }
            _ => None,
        };
        Ok(Judge {
            cloud,
            config,
            local,
        })
    }

    /// The cloud whose annotations are judged.
    pub fn cloud(&self) -> Cloud {
        self.cloud
    }

    /// Takes what the controller reads besides Services from the input objects (recursing into
    /// `kind: List`): the `IPPool`s and the labels of Namespaces, for `local`. The provider is
    /// given them once, as the controller's first list gives them.
    pub fn learn<'a>(&mut self, values: impl IntoIterator<Item = &'a Value>) {
        let Some(local) = &mut self.local else {
            return;
        };
        for value in values {
            local.learn(value);
        }
        let pools: Vec<Arc<DynamicObject>> = local.pools.values().cloned().collect();
        local
            .provider
            .set_pools(crate::controller::pools::pool_defs(&pools));
        local
            .provider
            .set_namespace_labels(local.namespaces.clone());
    }

    /// What the provider says of a parsed spec before any address is given: (errors,
    /// warnings). Only `local` is asked: the cloud providers' judgement needs the cloud.
    fn provider_verdict(&self, spec: &LoadBalancerSpec) -> (Vec<String>, Vec<String>) {
        let Some(local) = &self.local else {
            return (Vec::new(), Vec::new());
        };
        let planned = local
            .runtime
            .block_on(local.provider.plan_ensure(spec, &[]));
        match planned {
            Ok(_) => (Vec::new(), Vec::new()),
            // Only the Service's author can fix it: the controller reports a user error.
            Err(error) if error.class() == "user" => (vec![error.to_string()], Vec::new()),
            Err(error) => (
                Vec::new(),
                vec![format!(
                    "no address yet: {error} (the controller keeps the Service pending and retries \
                     when the address pools change)"
                )],
            ),
        }
    }
}

impl LocalJudge {
    /// Keeps `value` when it is an `IPPool` or a Namespace, in input order (a later object of
    /// the same name replaces an earlier one, as in the API server); a `kind: List` is
    /// walked (its nesting is bounded by the manifest reader).
    fn learn(&mut self, value: &Value) {
        let (kind, _) = manifests::describe(value);
        if kind.ends_with("List")
            && let Some(Value::Array(items)) = value.get("items")
        {
            for item in items {
                self.learn(item);
            }
            return;
        }
        let api_version = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind == ippool::KIND && api_version.starts_with(&format!("{}/", ippool::GROUP)) {
            // Read as the controller reads the stored object (a spec that does not decode is a
            // pool with no address); an object that is not one at all is skipped.
            if let Ok(object) = serde_json::from_value::<DynamicObject>(value.clone()) {
                let name = object.metadata.name.clone().unwrap_or_default();
                self.pools.insert(name, Arc::new(object));
            }
        } else if kind == "Namespace"
            && let Some(name) = value.pointer("/metadata/name").and_then(Value::as_str)
        {
            let labels = value
                .pointer("/metadata/labels")
                .and_then(|l| serde_json::from_value(l.clone()).ok())
                .unwrap_or_default();
            self.namespaces.insert(name.to_owned(), labels);
        }
    }
}

/// Runs `kube-lb lint`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cloud = Cloud::from(args.cloud);
    let mut judge = Judge::with(
        cloud,
        args.local_pool,
        args.load_balancer_class,
        args.default_class,
    )?;
    let mut input_errors = Vec::new();
    // Every input is read before any Service is judged: an IPPool may come after the Services
    // it serves, and the controller sees them all at once.
    let mut inputs = Vec::new();
    for input in &args.files {
        for (source, text) in read_inputs(input, &mut input_errors) {
            match documents(&source, &text) {
                Ok(values) => inputs.push((source, values)),
                Err(error) => input_errors.push(error),
            }
        }
    }
    judge.learn(inputs.iter().flat_map(|(_, values)| values));
    let mut reports = Vec::new();
    for (source, values) in inputs {
        lint_documents(&source, values, &judge, &mut reports);
    }

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    write_reports(&mut out, &reports, args.output)?;
    out.flush()?;

    let mut err = std::io::stderr().lock();
    for error in &input_errors {
        writeln!(err, "error: {error}")?;
    }
    writeln!(err, "{}", summary(&reports, cloud))?;

    Ok(ExitCode::from(exit_code(&reports, &input_errors)))
}

/// 2 for unreadable input, else 1 for any invalid object, else 0.
pub fn exit_code(reports: &[Report], input_errors: &[InputError]) -> u8 {
    if !input_errors.is_empty() {
        2
    } else if reports.iter().any(|r| r.status == Status::Invalid) {
        1
    } else {
        0
    }
}

/// One line for stderr: counts per status.
pub fn summary(reports: &[Report], cloud: Cloud) -> String {
    let count = |s: Status| reports.iter().filter(|r| r.status == s).count();
    let warnings: usize = reports.iter().map(|r| r.warnings.len()).sum();
    let errors: usize = reports.iter().map(|r| r.errors.len()).sum();
    format!(
        "lint (cloud {cloud}): {} ok, {} invalid, {} skipped; {errors} errors, {warnings} warnings",
        count(Status::Ok),
        count(Status::Invalid),
        count(Status::Skipped),
    )
}

/// Writes the reports in the chosen format.
pub fn write_reports(
    out: &mut impl Write,
    reports: &[Report],
    format: OutputFormat,
) -> anyhow::Result<()> {
    match format {
        OutputFormat::Json => {
            serde_json::to_writer_pretty(&mut *out, reports)?;
            writeln!(out)?;
        }
        OutputFormat::Yaml => {
            for report in reports {
                writeln!(out, "---")?;
                let text =
                    serde_yaml_ng::to_string(report).context("rendering a report as YAML")?;
                out.write_all(text.as_bytes())?;
            }
        }
    }
    Ok(())
}

/// Expands one `-f` argument into `(source name, text)` pairs; unreadable inputs are recorded.
fn read_inputs(input: &str, errors: &mut Vec<InputError>) -> Vec<(String, String)> {
    if input == "-" {
        return match manifests::read_limited(std::io::stdin().lock()) {
            Ok(text) => vec![("<stdin>".to_owned(), text)],
            Err(error) => {
                errors.push(InputError {
                    source: "<stdin>".to_owned(),
                    message: error.to_string(),
                });
                Vec::new()
            }
        };
    }
    let path = Path::new(input);
    let files = if path.is_dir() {
        let mut files = Vec::new();
        collect_manifests(path, &mut files, errors);
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    files
        .into_iter()
        .filter_map(|file| {
            let source = file.display().to_string();
            match manifests::read_file(&file) {
                Ok(text) => Some((source, text)),
                Err(error) => {
                    errors.push(InputError {
                        source,
                        message: error.to_string(),
                    });
                    None
                }
            }
        })
        .collect()
}

/// Recursively finds `*.yaml`, `*.yml` and `*.json` below `dir`.
fn collect_manifests(dir: &Path, files: &mut Vec<PathBuf>, errors: &mut Vec<InputError>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => {
            errors.push(InputError {
                source: dir.display().to_string(),
                message: error.to_string(),
            });
            return;
        }
    };
    for entry in entries {
        let path = match entry {
            Ok(entry) => entry.path(),
            Err(error) => {
                errors.push(InputError {
                    source: dir.display().to_string(),
                    message: error.to_string(),
                });
                continue;
            }
        };
        if path.is_dir() {
            collect_manifests(&path, files, errors);
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            files.push(path);
        }
    }
}

/// Splits a text into documents (JSON, or a YAML stream) as JSON values, within the limits of
/// [`manifests::documents`].
pub fn documents(source: &str, text: &str) -> Result<Vec<Value>, InputError> {
    manifests::documents(source, text).map_err(|error| InputError {
        source: source.to_owned(),
        message: error.to_string(),
    })
}

/// Lints every object in one text with the controller's defaults ([`Judge::new`]), the
/// `IPPool`s and Namespaces of the text included. Not from inside an async runtime: for `local`
/// it drives the provider on a runtime of its own.
pub fn lint_text(source: &str, text: &str, cloud: Cloud) -> Result<Vec<Report>, InputError> {
    let values = documents(source, text)?;
    let mut judge = Judge::new(cloud).map_err(|error| InputError {
        source: source.to_owned(),
        message: format!("{error:#}"),
    })?;
    judge.learn(&values);
    let mut reports = Vec::new();
    lint_documents(source, values, &judge, &mut reports);
    Ok(reports)
}

/// Lints the documents of one input, named `source#1`, `source#2`, … (empty ones skipped).
pub fn lint_documents(source: &str, values: Vec<Value>, judge: &Judge, reports: &mut Vec<Report>) {
    for (i, value) in values.into_iter().enumerate() {
        if value.is_null() {
            continue;
        }
        lint_value(&format!("{source}#{}", i + 1), value, judge, reports);
    }
}

/// Lints one object (recursing into `kind: List`).
pub fn lint_value(source: &str, mut value: Value, judge: &Judge, reports: &mut Vec<Report>) {
    let cloud = judge.cloud;
    let (kind, object) = manifests::describe(&value);
    let report = |status, reason: Option<String>, spec, warnings, errors| Report {
        source: source.to_owned(),
        object: object.clone(),
        status,
        reason,
        spec,
        warnings,
        errors,
    };
    if kind.ends_with("List") && value.get("items").is_some_and(Value::is_array) {
        if let Some(Value::Array(items)) = value.get_mut("items").map(Value::take) {
            for (i, item) in items.into_iter().enumerate() {
                lint_value(&format!("{source}/items[{i}]"), item, judge, reports);
            }
        }
        return;
    }
    if kind != "Service" {
        let reason = if judge.local.is_some() && kind == ippool::KIND {
            "an address pool of the local provider: the Services are judged with it".to_owned()
        } else {
            format!("{kind} is not a Service")
        };
        reports.push(report(
            Status::Skipped,
            Some(reason),
            None,
            Vec::new(),
            Vec::new(),
        ));
        return;
    }
    let service = match manifests::service_object(value) {
        Ok((service, _)) => service,
        Err(error) => {
            reports.push(report(
                Status::Invalid,
                None,
                None,
                Vec::new(),
                vec![error.message],
            ));
            return;
        }
    };
    if let Some((reason, warning)) = left_alone(&service, &judge.config) {
        reports.push(report(
            Status::Skipped,
            Some(reason),
            None,
            vec![warning],
            Vec::new(),
        ));
        return;
    }
    match kube_lb_annotations::parse(cloud, &service) {
        Ok(parsed) => {
            let (errors, mut provider_warnings) = judge.provider_verdict(&parsed.spec);
            let mut warnings: Vec<String> =
                parsed.warnings.iter().map(ToString::to_string).collect();
            warnings.append(&mut provider_warnings);
            if errors.is_empty() {
                reports.push(report(
                    Status::Ok,
                    None,
                    Some(parsed.spec),
                    warnings,
                    Vec::new(),
                ));
            } else {
                reports.push(report(Status::Invalid, None, None, warnings, errors));
            }
        }
        Err(errors) if errors.is_not_load_balancer() => {
            let service_type = service
                .spec
                .as_ref()
                .and_then(|s| s.type_.clone())
                .unwrap_or_else(|| "ClusterIP".to_owned());
            reports.push(report(
                Status::Skipped,
                Some(format!(
                    "type {}, not LoadBalancer",
                    kube_lb_annotations::truncate(&service_type, 63)
                )),
                None,
                Vec::new(),
                Vec::new(),
            ));
        }
        Err(errors) => reports.push(report(
            Status::Invalid,
            None,
            None,
            errors.warnings().iter().map(ToString::to_string).collect(),
            errors.errors().iter().map(ToString::to_string).collect(),
        )),
    }
}

/// For a LoadBalancer Service the controller leaves to another controller (by
/// [`ControllerConfig::manages`], the controller's own test): the reason to skip it and a
/// warning naming its class. `None` when the controller handles it, or it is no LoadBalancer.
fn left_alone(service: &Service, config: &ControllerConfig) -> Option<(String, String)> {
    let spec = service.spec.as_ref()?;
    if spec.type_.as_deref() != Some("LoadBalancer") || config.manages(service) {
        return None;
    }
    let handled = handled_classes(config);
    let Some(class) = spec.load_balancer_class.as_deref() else {
        return Some((
            "no loadBalancerClass, and Services without one are left to another controller"
                .to_owned(),
            format!(
                "spec.loadBalancerClass: not set, and this controller handles {handled} \
                 (--default-class true to handle it); nothing was checked"
            ),
        ));
    };
    let class = kube_lb_annotations::truncate(class, 253);
    Some((
        format!("loadBalancerClass {class:?} is left to another controller"),
        format!(
            "spec.loadBalancerClass = {class:?}: not handled by this controller, which handles \
             {handled}; nothing was checked (lint with --load-balancer-class {class} to judge it \
             as the controller of that class would)"
        ),
    ))
}

/// What the controller handles, in words.
fn handled_classes(config: &ControllerConfig) -> String {
    match (&config.load_balancer_class, config.default_class) {
        (Some(class), true) => format!("class {class:?} and Services without a class"),
        (Some(class), false) => format!("class {class:?} only"),
        (None, true) => "Services without a class only".to_owned(),
        (None, false) => "no Service (no --load-balancer-class, --default-class false)".to_owned(),
    }
}
