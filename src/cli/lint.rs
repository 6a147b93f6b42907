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

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use kube_lb_annotations::{Cloud, LoadBalancerSpec};
use serde::Serialize;
use serde_json::Value;

use crate::manifests;

/// Arguments of `kube-lb lint`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 all LoadBalancer Services valid, 1 at least one object \
has errors, 2 a file could not be read or parsed as YAML/JSON.\n\nExamples:\n  kube-lb lint -f \
examples/\n  kube-lb lint -f examples/aws --cloud aws\n  kubectl get svc -A -o yaml | kube-lb lint \
-f - --cloud aws -o json"
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

/// Runs `kube-lb lint`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cloud = Cloud::from(args.cloud);
    let mut reports = Vec::new();
    let mut input_errors = Vec::new();
    for input in &args.files {
        for (source, text) in read_inputs(input, &mut input_errors) {
            match lint_text(&source, &text, cloud) {
                Ok(mut found) => reports.append(&mut found),
                Err(error) => input_errors.push(error),
            }
        }
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

/// Lints every object in one text.
pub fn lint_text(source: &str, text: &str, cloud: Cloud) -> Result<Vec<Report>, InputError> {
    let mut reports = Vec::new();
    for (i, value) in documents(source, text)?.into_iter().enumerate() {
        if value.is_null() {
            continue;
        }
        lint_value(&format!("{source}#{}", i + 1), value, cloud, &mut reports);
    }
    Ok(reports)
}

/// Lints one object (recursing into `kind: List`).
pub fn lint_value(source: &str, mut value: Value, cloud: Cloud, reports: &mut Vec<Report>) {
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
                lint_value(&format!("{source}/items[{i}]"), item, cloud, reports);
            }
        }
        return;
    }
    if kind != "Service" {
        reports.push(report(
            Status::Skipped,
            Some(format!("{kind} is not a Service")),
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
    match kube_lb_annotations::parse(cloud, &service) {
        Ok(parsed) => reports.push(report(
            Status::Ok,
            None,
            Some(parsed.spec),
            parsed.warnings.iter().map(ToString::to_string).collect(),
            Vec::new(),
        )),
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
