//! `kube-lb audit`: cloud resources of this cluster whose Service no longer needs them, and
//! (with `--delete`) their removal through the provider's resumable delete. The judgement is
//! [`crate::audit::classify`], the same the controller's periodic audit uses.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context as _;
use k8s_openapi::jiff::Timestamp;
use kube_lb_provider_core::{CallCounter, LoadBalancerProvider, ServiceKey};
use serde::Serialize;

use crate::audit::{self, Leak};
use crate::cli::plan::{Cluster, ClusterArgs, Output};
use crate::cloud::{self, CloudArgs};
use crate::controller;

/// Arguments of `kube-lb audit`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
A resource is leaked when it carries this cluster's ownership (tags, labels or names) and its \
Service (matched by UID where the resource records one, else by namespace/name) no longer \
exists, is being deleted without kube-lb's finalizer, is no longer type LoadBalancer, or has a \
loadBalancerClass this controller does not handle. Resources of a live Service are never \
listed, nor those of a Service that does not decode. A resource shared by several Services (a \
node security-group rule, a shared health check) is leaked only when no LoadBalancer Service of \
this controller remains at all.

Exit status: 0 nothing leaked (or, with --delete, every leaked resource removed); 2 leaked \
resources found (without --delete); 1 an error: a refused cloud read or an unreachable cluster \
(never reported as \"nothing leaked\"), or a failed delete. A usage error exits 2 (clap's \
convention).

The `local` provider keeps its allocations in memory: from a separate process it knows only \
the addresses recorded in Service statuses (re-adopted first, as the controller does), so it \
finds leaks of Services that still exist (retyped, reclassed); the controller's periodic audit \
(`controller --audit-interval`) sees its own pool.

JSON (-o json): {\"provider\", \"owned\": N, \"leaked\": [{\"kind\", \"name\", \"service\": \
{\"namespace\", \"name\", \"uid\"}, \"created\", \"ageSeconds\", \"shared\", \"reason\", \
\"reasonCode\": \"ServiceDeleted\"|\"DeletingWithoutFinalizer\"|\"NotLoadBalancer\"|\"OtherClass\"|\
\"SharedUnused\", \"deleted\"?, \"error\"?, \"kept\"?}], \"unjudgedServices\": [...]}.

A resource whose Service is gone by UID while a Service of the same namespace/name exists \
(reason \"Service deleted (a Service of that name exists with another UID)\") is listed but \
kept by --delete unless --force is given: that is what a Service deleted and created again \
leaves, but also what every Service of manifests read without the UIDs they were built with \
looks like (each run of the embedded API server gives new UIDs to objects that carry none). \
Run with --state-file (the file `reconcile --state-file` wrote) or --kubeconfig to see the \
Services as they were built, or put metadata.uid in the manifests.

Examples:
  kube-lb audit --cloud gcp --cloud-config gce.conf
  kube-lb audit --cloud aws --kubeconfig ~/.kube/prod -o json
  kube-lb audit --cloud aws --delete

  $ kube-lb audit -f services.yaml; echo $?
  KIND      NAME          SERVICE          AGE         REASON
  Address   127.240.0.3   default/legacy   <unknown>   Service is type ClusterIP

  1 leaked resource(s) of 3 owned by this cluster; remove them with --delete.
  2")]
pub struct Args {
    #[command(flatten)]
    pub cloud: CloudArgs,

    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,

    /// Delete the leaked resources (per Service, through the provider's delete) and print
    /// what was removed.
    #[arg(long)]
    pub delete: bool,

    /// With --delete, also delete resources of a Service that exists by namespace/name with
    /// another UID (see above); without it they are kept and reported.
    #[arg(long, requires = "delete")]
    pub force: bool,
}

/// Why `--delete` without `--force` keeps a resource of a recreated Service.
pub const KEPT_OTHER_UID: &str = "Service exists with another UID: run with --state-file or \
     --kubeconfig to audit the Services it was built for (or --force to delete it)";

/// Why `--delete` without `--force` keeps, on manifests read without a state file, a resource
/// that records only its Service's UID: whether that Service is among the manifests' (under a
/// new UID) cannot be told.
pub const KEPT_UID_ONLY: &str = "its Service is known only by UID, and these manifests' \
     Services have new UIDs: run with --state-file or --kubeconfig to audit the Services it was \
     built for (or --force to delete it)";

/// One printed leaked resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeakRow {
    /// Resource kind, in the cloud's vocabulary.
    pub kind: String,
    /// Resource name.
    pub name: String,
    /// The Service it was made for, as the resource records it.
    pub service: ServiceKey,
    /// Creation time as the cloud reports it.
    pub created: Option<String>,
    /// Age in seconds at the time of the audit.
    pub age_seconds: Option<u64>,
    /// Shared by several Services.
    pub shared: bool,
    /// Why it is leaked, for people.
    pub reason: String,
    /// Why it is leaked, for scripts.
    pub reason_code: &'static str,
    /// With `--delete`: whether it was removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<bool>,
    /// With `--delete`: why removing it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// With `--delete`: why it was kept instead ([`KEPT_OTHER_UID`], [`KEPT_UID_ONLY`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<&'static str>,
    /// Why the audit cannot confirm that the Service is gone ([`KEPT_OTHER_UID`],
    /// [`KEPT_UID_ONLY`]): `--delete` keeps such a resource unless `--force`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unconfirmed: Option<&'static str>,
}

impl LeakRow {
    /// The row of `leak`; `uid_unknown` as in [`unconfirmed`].
    fn of(leak: &Leak, now: Timestamp, uid_unknown: bool) -> Self {
        let resource = &leak.resource;
        Self {
            kind: resource.kind.clone(),
            name: resource.name.clone(),
            service: resource.service.clone(),
            created: resource.created.clone(),
            age_seconds: audit::age(resource.created.as_deref(), now).map(|d| d.as_secs()),
            shared: resource.shared,
            reason: leak.reason.to_string(),
            reason_code: leak.reason.code(),
            deleted: None,
            error: None,
            kept: None,
            unconfirmed: unconfirmed(leak, uid_unknown),
        }
    }
}

/// Why `leak` may not be a leak at all: its Service exists by namespace/name with another UID,
/// or it records only a UID while the owner may be among the Services under a new one
/// (`uid_unknown`: the Services' UIDs are not the ones the cloud state was built for —
/// manifests without a state file — and some load balancer Service owns nothing yet).
pub(crate) fn unconfirmed(leak: &Leak, uid_unknown: bool) -> Option<&'static str> {
    let service = &leak.resource.service;
    match leak.reason {
        audit::LeakReason::ServiceDeleted { recreated: true } => Some(KEPT_OTHER_UID),
        audit::LeakReason::ServiceDeleted { recreated: false }
            if uid_unknown && service.name.is_empty() && !service.uid.is_empty() =>
        {
            Some(KEPT_UID_ONLY)
        }
        _ => None,
    }
}

/// Everything `kube-lb audit` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditReport {
    /// The provider's name.
    pub provider: &'static str,
    /// How many resources the provider owns in all.
    pub owned: usize,
    /// The leaked ones.
    pub leaked: Vec<LeakRow>,
    /// Services that do not decode (their resources were counted as in use).
    pub unjudged_services: Vec<String>,
}

impl AuditReport {
    /// 0 nothing leaked or all deleted; 2 leaks found without `--delete`, or kept by it; 1 a
    /// failed delete.
    pub fn exit_code(&self, deleting: bool) -> u8 {
        if self.leaked.iter().any(|l| l.error.is_some()) {
            1
        } else if (!deleting && !self.leaked.is_empty())
            || self.leaked.iter().any(|l| l.kept.is_some())
        {
            2
        } else {
            0
        }
    }
}

fn service_column(key: &ServiceKey) -> String {
    match (key.namespace.is_empty(), key.name.is_empty()) {
        (false, false) => key.to_string(),
        _ if !key.uid.is_empty() => format!("uid {}", key.uid),
        _ => "-".to_string(),
    }
}

/// The readable form: kubectl-like columns, then (with `--delete`) what was removed, then a
/// summary line.
pub fn table(report: &AuditReport, deleting: bool) -> String {
    let header = ["KIND", "NAME", "SERVICE", "AGE", "REASON"];
    let rows: Vec<[String; 5]> = report
        .leaked
        .iter()
        .map(|row| {
            [
                row.kind.clone(),
                row.name.clone(),
                service_column(&row.service),
                row.age_seconds.map_or_else(
                    || "<unknown>".to_string(),
                    |s| audit::format_age(std::time::Duration::from_secs(s)),
                ),
                row.reason.clone(),
            ]
        })
        .collect();
    let mut out = String::new();
    if !rows.is_empty() {
        let mut widths = header.map(str::len);
        for row in &rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.len());
            }
        }
        let line = |cells: [&str; 5]| {
            let mut text = String::new();
            for (i, cell) in cells.iter().enumerate() {
                text.push_str(&format!("{cell:<width$}   ", width = widths[i]));
            }
            text.trim_end().to_string() + "\n"
        };
        out.push_str(&line(header));
        for row in &rows {
            out.push_str(&line([&row[0], &row[1], &row[2], &row[3], &row[4]]));
        }
        out.push('\n');
    }
    if deleting {
        for row in &report.leaked {
            match (&row.deleted, &row.error) {
                _ if row.kept.is_some() => out.push_str(&format!(
                    "kept: {} {} (Service {}): {}\n",
                    row.kind,
                    row.name,
                    service_column(&row.service),
                    row.kept.unwrap_or_default()
                )),
                (_, Some(error)) => out.push_str(&format!(
                    "not deleted: {} {} (Service {}): {error}\n",
                    row.kind,
                    row.name,
                    service_column(&row.service)
                )),
                (Some(true), None) => out.push_str(&format!(
                    "deleted: {} {} (Service {})\n",
                    row.kind,
                    row.name,
                    service_column(&row.service)
                )),
                _ => {}
            }
        }
    }
    let leaked = report.leaked.len();
    if leaked == 0 {
        out.push_str(&format!(
            "No leaked resources: {} owned by this cluster, all in use.\n",
            report.owned
        ));
    } else if deleting {
        let failed = report.leaked.iter().filter(|l| l.error.is_some()).count();
        let kept = report.leaked.iter().filter(|l| l.kept.is_some()).count();
        let kept_text = if kept > 0 {
            format!("; {kept} kept")
        } else {
            String::new()
        };
        out.push_str(&format!(
            "{} of {leaked} leaked resource(s) deleted; {failed} failed{kept_text}.\n",
            leaked - failed - kept
        ));
    } else {
        out.push_str(&format!(
            "{leaked} leaked resource(s) of {} owned by this cluster; remove them with --delete.\n",
            report.owned
        ));
    }
    let unconfirmed = report
        .leaked
        .iter()
        .filter(|l| l.unconfirmed.is_some())
        .count();
    if unconfirmed > 0 {
        out.push_str(&format!(
            "{unconfirmed} of them may belong to a Service listed here under another UID: \
             deleted and created again, or manifests read without the UIDs the load balancers \
             were built for (use --state-file or --kubeconfig); --delete keeps them unless \
             --force is given.\n"
        ));
    }
    out
}

/// Marks the rows `--delete` must keep, unless `force`: those [`unconfirmed`] found.
fn keep_unconfirmed(rows: &mut [LeakRow], force: bool) {
    if force {
        return;
    }
    for row in rows.iter_mut().filter(|row| row.unconfirmed.is_some()) {
        row.kept = row.unconfirmed;
        row.deleted = Some(false);
    }
}

/// Deletes the leaked resources, one provider `delete` per Service, recording the outcome on
/// each row.
async fn delete_leaked(provider: &dyn LoadBalancerProvider, rows: &mut [LeakRow]) {
    let mut by_service: BTreeMap<ServiceKey, Vec<usize>> = BTreeMap::new();
    for (i, row) in rows
        .iter()
        .enumerate()
        .filter(|(_, row)| row.kept.is_none())
    {
        by_service.entry(row.service.clone()).or_default().push(i);
    }
    for (service, indexes) in by_service {
        let result = provider.delete(&service).await;
        if let Err(error) = &result {
            tracing::warn!(service = %service_column(&service), %error, "deleting leaked resources failed");
        }
        for i in indexes {
            match &result {
                Ok(()) => rows[i].deleted = Some(true),
                Err(error) => {
                    rows[i].deleted = Some(false);
                    rows[i].error = Some(format!("{} delete: {error}", provider.name()));
                }
            }
        }
    }
}

/// Runs `kube-lb audit`. Every failure exits 1 (not the binary's generic 2, which here means
/// "leaks found").
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match execute(&args).await {
        Ok(code) => Ok(ExitCode::from(code)),
        Err(error) => {
            eprintln!("error: {error:#}");
            Ok(ExitCode::from(1))
        }
    }
}

/// Audits what `provider` owns against the Services of `client`: first re-adopts the
/// addresses recorded in Service statuses (as the controller does at start), then classifies,
/// then with `options.delete` removes the leaked resources through the provider's delete.
pub async fn audit(
    client: kube::Client,
    provider: &dyn LoadBalancerProvider,
    config: &crate::controller::ControllerConfig,
    options: AuditOptions,
) -> anyhow::Result<AuditReport> {
    let (services, _) = audit::list_services(client.clone())
        .await
        .context("listing Services")?;
    controller::adopt_statuses(provider, &services).await;
    let found = audit::find_leaks(client, provider, config).await?;
    let now = Timestamp::now();
    let uid_unknown = !options.lasting && !found.unowned_services.is_empty();
    let mut report = AuditReport {
        provider: provider.name(),
        owned: found.owned,
        leaked: found
            .leaks
            .iter()
            .map(|l| LeakRow::of(l, now, uid_unknown))
            .collect(),
        unjudged_services: found.undecodable.iter().map(ToString::to_string).collect(),
    };
    if options.delete {
        keep_unconfirmed(&mut report.leaked, options.force);
        delete_leaked(provider, &mut report.leaked).await;
    }
    Ok(report)
}

/// How [`audit`] judges and what it does with the leaked resources it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditOptions {
    /// Delete them (`--delete`), but keep the [`unconfirmed`] ones.
    pub delete: bool,
    /// Delete the unconfirmed ones too (`--force`).
    pub force: bool,
    /// The Services' UIDs are the cluster's own (a live cluster, a state file), not new ones
    /// given to manifests.
    pub lasting: bool,
}

async fn execute(args: &Args) -> anyhow::Result<u8> {
    let cluster = Cluster::connect(&args.cluster).await?;
    let config = args.cluster.controller_config(args.cloud.cloud);
    let result = async {
        let provider =
            cloud::build(&cluster.cloud_args(&args.cloud).await, CallCounter::new()).await?;
        audit(
            cluster.client.clone(),
            provider.provider.as_ref(),
            &config,
            AuditOptions {
                delete: args.delete,
                force: args.force,
                lasting: cluster.lasting,
            },
        )
        .await
    }
    .await;
    cluster.close().await;
    let report = result?;
    for service in &report.unjudged_services {
        eprintln!("warning: not judged, its resources count as in use: {service}");
    }
    match args.output {
        Output::Table => print!("{}", table(&report, args.delete)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(report.exit_code(args.delete))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, deleted: Option<bool>, error: Option<&str>) -> LeakRow {
        LeakRow {
            kind: "Address".into(),
            name: name.into(),
            service: ServiceKey {
                namespace: "default".into(),
                name: "old".into(),
                uid: "u-1".into(),
            },
            created: None,
            age_seconds: Some(300),
            shared: false,
            reason: "Service deleted".into(),
            reason_code: "ServiceDeleted",
            deleted,
            error: error.map(String::from),
            kept: None,
            unconfirmed: None,
        }
    }

    fn report(leaked: Vec<LeakRow>) -> AuditReport {
        AuditReport {
            provider: "local",
            owned: 3,
            leaked,
            unjudged_services: vec![],
        }
    }

    #[test]
    fn exit_codes() {
        // (case, rows, --delete, exit)
        let cases = [
            ("nothing leaked", vec![], false, 0),
            ("nothing leaked, --delete", vec![], true, 0),
            ("leaked", vec![row("a", None, None)], false, 2),
            (
                "leaked and deleted",
                vec![row("a", Some(true), None)],
                true,
                0,
            ),
            (
                "a delete failed",
                vec![
                    row("a", Some(true), None),
                    row("b", Some(false), Some("403")),
                ],
                true,
                1,
            ),
        ];
        for (case, rows, deleting, want) in cases {
            assert_eq!(report(rows).exit_code(deleting), want, "{case}");
        }
    }

    #[test]
    fn delete_keeps_what_may_belong_to_a_listed_service_unless_forced() {
        let mut unconfirmed = row("10.0.0.9", None, None);
        unconfirmed.unconfirmed = Some(KEPT_UID_ONLY);
        let leaked = vec![row("127.240.0.3", None, None), unconfirmed];
        // (case, --force, kept per row)
        let cases = [
            ("without --force", false, vec![None, Some(KEPT_UID_ONLY)]),
            ("with --force", true, vec![None, None]),
        ];
        for (case, force, want) in cases {
            let mut rows = leaked.clone();
            keep_unconfirmed(&mut rows, force);
            let kept: Vec<_> = rows.iter().map(|r| r.kept).collect();
            assert_eq!(kept, want, "{case}");
        }
        let mut rows = leaked.clone();
        keep_unconfirmed(&mut rows, false);
        rows[0].deleted = Some(true);
        let report = report(rows);
        assert_eq!(
            report.exit_code(true),
            2,
            "a kept resource is not 'all removed'"
        );
        let text = table(&report, true);
        assert!(
            text.contains(&format!(
                "kept: Address 10.0.0.9 (Service default/old): {KEPT_UID_ONLY}\n"
            )),
            "{text}"
        );
        assert!(
            text.contains("1 of 2 leaked resource(s) deleted; 0 failed; 1 kept.\n"),
            "{text}"
        );
        assert!(text.contains("--force"), "{text}");
    }

    #[test]
    fn table_lists_age_and_reason_and_what_was_deleted() {
        let text = table(&report(vec![row("127.240.0.3", None, None)]), false);
        assert_eq!(
            text,
            "\
KIND      NAME          SERVICE       AGE   REASON
Address   127.240.0.3   default/old   5m    Service deleted

1 leaked resource(s) of 3 owned by this cluster; remove them with --delete.
"
        );
        let text = table(&report(vec![row("127.240.0.3", Some(true), None)]), true);
        assert!(
            text.contains("deleted: Address 127.240.0.3 (Service default/old)\n"),
            "{text}"
        );
        assert!(
            text.ends_with("1 of 1 leaked resource(s) deleted; 0 failed.\n"),
            "{text}"
        );
        assert_eq!(
            table(&report(vec![]), false),
            "No leaked resources: 3 owned by this cluster, all in use.\n"
        );
    }
}
