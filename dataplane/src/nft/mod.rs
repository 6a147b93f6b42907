//! nftables backend: a pure renderer ([`render`]) and a thin applier that pipes one transaction
//! per sync into `nft -f -`, remembering what it committed so the next sync is a diff.

mod libnft;
pub mod monitor;
pub mod render;
mod state;
pub mod verify;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

pub use monitor::{ChangeMonitor, ForeignChange};
pub use render::{Family, GroupIds, NftConfig, NftScheduler, Ruleset};
pub use verify::{Finding, RepairReason};

use crate::model::{PortKey, ServicePortModel, Snapshot};
use state::{Change, FamilyTable, UdpEndpoints};

/// Errors of the nftables backend.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// The `nft` (or `conntrack`) program could not be started or talked to.
    #[error("running {program}")]
    Spawn {
        /// Program name.
        program: String,
        /// Underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `nft` rejected the transaction; nothing was changed.
    #[error("nft rejected the transaction: {stderr}")]
    Rejected {
        /// What nft printed.
        stderr: String,
    },
    /// The kernel's table could not be listed or the listing not read (a check, not a write).
    #[error("listing the nftables table: {detail}")]
    Listing {
        /// What went wrong.
        detail: String,
    },
}

/// How the backend runs `nft` and `conntrack`: a command prefix, e.g. `["nft"]`, or
/// `["ip", "netns", "exec", "node1", "nft"]` for tests driving a network namespace.
#[derive(Debug, Clone)]
pub struct Commands {
    /// Prefix used to run nft; `-f -` is appended.
    pub nft: Vec<String>,
    /// Prefix used to run conntrack; `None` disables UDP conntrack cleanup.
    pub conntrack: Option<Vec<String>>,
    /// Prefix used to run `sysctl` (for `route_localnet`, see [`NftBackend::sync`]); empty:
    /// write `/proc/sys` directly, in this process's own network namespace (as on a node).
    pub sysctl: Vec<String>,
}

impl Default for Commands {
    fn default() -> Self {
        Commands {
            nft: vec!["nft".into()],
            conntrack: Some(vec!["conntrack".into()]),
            sysctl: Vec::new(),
        }
    }
}

impl Commands {
    /// Runs every program inside network namespace `netns` through `ip netns exec`.
    pub fn in_netns(netns: &str) -> Self {
        let prefix = |program: &str| {
            vec![
                "ip".to_owned(),
                "netns".into(),
                "exec".into(),
                netns.to_owned(),
                program.to_owned(),
            ]
        };
        Commands {
            nft: prefix("nft"),
            conntrack: Some(prefix("conntrack")),
            sysctl: prefix("sysctl"),
        }
    }
}

/// What one sync did.
#[derive(Debug, Clone, Default)]
pub struct SyncReport {
    /// True if the table was recreated.
    pub full: bool,
    /// Lines in the transaction (0: nothing to do, nft was not run).
    pub commands: usize,
    /// Time spent in `nft`.
    pub nft_time: Duration,
    /// Conntrack deletions attempted.
    pub conntrack_deletions: usize,
    /// Service ports that could not be programmed.
    pub warnings: Vec<String>,
}

#[derive(Debug, Default)]
struct FamilyState {
    ids: GroupIds,
    /// `None`: the next sync recreates the table.
    committed: Option<FamilyTable>,
    /// Hash of the kernel's listing at the last check that found the table intact, when the
    /// backend wrote nothing since ([`verify`]); `None` after every write.
    fingerprint: Option<u64>,
}

/// The nftables dataplane of one node: one table per family.
#[derive(Debug)]
pub struct NftBackend {
    config: NftConfig,
    commands: Commands,
    families: Vec<(Family, FamilyState)>,
    /// The port models of the last successful sync: what the tables were rendered from.
    models: BTreeMap<PortKey, ServicePortModel>,
    /// UDP endpoint users of `models`.
    udp: UdpEndpoints,
    /// A sync failed since `models` was written: the next one compares every port instead of
    /// trusting the caller's list of changed ports.
    compare_all: bool,
    /// `net.ipv4.conf.all.route_localnet` was set to 1 by this backend.
    route_localnet: bool,
    /// The kept libnftables context (see [`libnft`]), opened by the first transaction it runs.
    context: Option<libnft::Context>,
    /// libnftables could not be loaded: every transaction runs the `nft` program.
    no_library: bool,
    /// The `nft` children this backend started, so the change monitor can tell its writes
    /// from someone else's.
    writers: monitor::Writers,
}

/// Incremental transactions up to this size run in the kept libnftables context. Full syncs
/// and larger ones run the `nft` program: libnftables holds its parse of every element while
/// it runs (a full sync of 10,000 elements raised the proxy's peak RSS from 30 to 49 MiB when it
/// ran in process), and a sync of seconds would block the runtime thread. 256 KiB is ~6,000
/// elements, several Maglev endpoint changes.
const IN_PROCESS_MAX_BYTES: usize = 256 << 10;

/// Ports whose model differs between `old` and `new`, in key order. `candidates`: only these
/// may differ (the rest are not compared).
fn changed_ports<'a>(
    old: &'a BTreeMap<PortKey, ServicePortModel>,
    new: &'a BTreeMap<PortKey, ServicePortModel>,
    candidates: Option<&'a BTreeSet<PortKey>>,
) -> Vec<Change<'a>> {
    let change = |key: &'a PortKey| {
        let (old, new) = (old.get(key), new.get(key));
        (old != new).then_some(Change { key, old, new })
    };
    if let Some(candidates) = candidates {
        return candidates.iter().filter_map(change).collect();
    }
    // One merge walk over both sorted maps: a lookup per port would cost a log factor of
    // string comparisons at tens of thousands of ports.
    let mut changes = Vec::new();
    let (mut left, mut right) = (old.iter().peekable(), new.iter().peekable());
    loop {
        let order = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some((a, _)), Some((b, _))) => a.cmp(b),
        };
        match order {
            std::cmp::Ordering::Less => {
                if let Some((key, model)) = left.next() {
                    changes.push(Change {
                        key,
                        old: Some(model),
                        new: None,
                    });
                }
            }
            std::cmp::Ordering::Greater => {
                if let Some((key, model)) = right.next() {
                    changes.push(Change {
                        key,
                        old: None,
                        new: Some(model),
                    });
                }
            }
            std::cmp::Ordering::Equal => {
                if let (Some((key, a)), Some((_, b))) = (left.next(), right.next())
                    && a != b
                {
                    changes.push(Change {
                        key,
                        old: Some(a),
                        new: Some(b),
                    });
                }
            }
        }
    }
    changes
}

impl NftBackend {
    /// A backend that has committed nothing yet; its first sync recreates the tables.
    pub fn new(config: NftConfig, commands: Commands) -> Self {
        NftBackend {
            config,
            commands,
            families: vec![
                (Family::V4, FamilyState::default()),
                (Family::V6, FamilyState::default()),
            ],
            models: BTreeMap::new(),
            udp: UdpEndpoints::default(),
            // The first sync compares every port whatever the caller lists.
            compare_all: true,
            route_localnet: false,
            context: None,
            no_library: false,
            writers: monitor::Writers::default(),
        }
    }

    /// Forces the next sync to recreate the tables (after a failure, or periodically).
    pub fn force_full_sync(&mut self) {
        for (_, state) in &mut self.families {
            state.committed = None;
            state.fingerprint = None;
        }
    }

    /// The text the next sync would send, without applying it (for tests and `--dry-run`).
    /// Renders the whole snapshot: the reference the incremental sync is tested against.
    pub fn plan(&mut self, snapshot: &Snapshot) -> String {
        let mut text = String::new();
        for (family, state) in &mut self.families {
            let mut ids = state.ids.clone();
            let (ruleset, _) = render::render(snapshot, *family, &self.config, &mut ids);
            // As in a sync: a ruleset the kernel's containers cannot hold, or one that needs a
            // new pick chain, is sent as a full sync.
            let committed = state.committed.as_ref().filter(|table| {
                ruleset.fits(table.capacities())
                    && !ruleset.chains.keys().any(|chain| {
                        chain.starts_with(render::PICK_CHAIN_PREFIX)
                            && !table.ruleset().chains.contains_key(chain)
                    })
            });
            text.push_str(&render::diff(
                committed.map(FamilyTable::ruleset),
                &ruleset,
                *family,
                &self.config,
            ));
        }
        text
    }

    /// Brings the kernel to `snapshot` in one atomic transaction covering both families, then
    /// clears stale UDP conntrack entries. On error nothing was changed and the next sync is full.
    /// Only the ports whose model differs from the last sync's are rendered and diffed.
    pub async fn sync(&mut self, snapshot: &Snapshot) -> Result<SyncReport, NftError> {
        self.sync_changed(snapshot, None).await
    }

    /// [`NftBackend::sync`] for a caller that knows which ports may have changed since its last
    /// call (`changed`, a superset is fine: listed ports are still compared): the others are
    /// taken as unchanged without comparing them, which keeps a one-port change independent of
    /// the number of Services. After a failed sync every port is compared again.
    pub async fn sync_changed(
        &mut self,
        snapshot: &Snapshot,
        changed: Option<&BTreeSet<PortKey>>,
    ) -> Result<SyncReport, NftError> {
        if !self.route_localnet
            && snapshot
                .nodeport_addresses
                .iter()
                .any(|ip| ip.is_ipv4() && ip.is_loopback())
        {
            self.enable_route_localnet().await;
        }
        let mut report = SyncReport::default();
        let candidates = changed.filter(|_| !self.compare_all);
        let changes = changed_ports(&self.models, &snapshot.ports, candidates);
        let mut text = String::new();
        for (family, state) in &mut self.families {
            let family_text = match &mut state.committed {
                None => {
                    report.full = true;
                    let table = FamilyTable::full(
                        *family,
                        &self.config,
                        &mut state.ids,
                        snapshot.ports.values(),
                        &snapshot.nodeport_addresses,
                    );
                    let text = render::diff(None, table.ruleset(), *family, &self.config);
                    state.committed = Some(table);
                    text
                }
                Some(table) => {
                    // Ports with warnings are rendered again: a group that found no free mark
                    // id may find one now, as in a full render.
                    let mut family_changes = changes.clone();
                    let listed: BTreeSet<&PortKey> =
                        changes.iter().map(|change| change.key).collect();
                    let warned: Vec<&PortKey> = table
                        .warned_ports()
                        .filter(|key| !listed.contains(key))
                        .collect();
                    for key in warned {
                        if let Some((key, model)) = snapshot.ports.get_key_value(key) {
                            family_changes.push(Change {
                                key,
                                old: self.models.get(key),
                                new: Some(model),
                            });
                        }
                    }
                    family_changes.sort_by(|a, b| a.key.cmp(b.key));
                    let (before, after) = table.update(
                        *family,
                        &self.config,
                        &mut state.ids,
                        &family_changes,
                        &snapshot.nodeport_addresses,
                    );
                    let new_pick_chain = after.chains.keys().any(|chain| {
                        chain.starts_with(render::PICK_CHAIN_PREFIX)
                            && !before.chains.contains_key(chain)
                    });
                    if table.fits() && !new_pick_chain {
                        render::diff(Some(&before), &after, *family, &self.config)
                    } else {
                        // A container outgrew the size the last full sync declared (the
                        // kernel would refuse the elements), or a group size without a pick
                        // chain appeared: nft 1.0.6 refuses a rule binding `buckets` (its
                        // `typeof … th dport` read back from the kernel) outside the
                        // transaction that declares the map. Recreate the table, with room
                        // for twice what it holds now.
                        tracing::info!(
                            family = family.keyword(),
                            outgrown = !table.fits(),
                            new_pick_chain,
                            "recreating the table"
                        );
                        report.full = true;
                        table.redeclare();
                        render::diff(None, table.ruleset(), *family, &self.config)
                    }
                }
            };
            if let Some(table) = &state.committed {
                report.warnings.extend(table.warnings().cloned());
            }
            text.push_str(&family_text);
        }
        report.commands = text.lines().count();
        if report.commands > 0 {
            // The kernel's listing changes with this write: the next check takes a new
            // fingerprint.
            for (_, state) in &mut self.families {
                state.fingerprint = None;
            }
            let started = Instant::now();
            let run = run_transaction(
                &mut self.context,
                &mut self.no_library,
                &self.commands.nft,
                &self.writers,
                &text,
                report.full,
            );
            if let Err(error) = run.await {
                // The tables were updated in memory already: recreate them next time, and
                // compare every port then (the models still are the last good sync's).
                self.force_full_sync();
                self.compare_all = true;
                return Err(error);
            }
            report.nft_time = started.elapsed();
        }
        drop(text);
        let cleanup = self.udp.apply(&changes);
        let updates: Vec<(PortKey, Option<ServicePortModel>)> = changes
            .iter()
            .map(|change| (change.key.clone(), change.new.cloned()))
            .collect();
        for (key, model) in updates {
            match model {
                Some(model) => {
                    self.models.insert(key, model);
                }
                None => {
                    self.models.remove(&key);
                }
            }
        }
        self.compare_all = false;
        report.conntrack_deletions = self.clear_conntrack(&cleanup).await;
        Ok(report)
    }

    /// NodePorts on 127.0.0.0/8 (`--nodeport-addresses` with a loopback range, as the seeds'
    /// example does): a connection from the node to 127.0.0.1 that is DNATed to an endpoint
    /// elsewhere keeps its loopback source until postrouting masquerades it, and the kernel
    /// only routes such a packet off the node with `route_localnet` (what kube-proxy's
    /// iptables mode sets too). The ruleset's `filter-input` drops what that would otherwise
    /// let in from the network (non-loopback packets to 127.0.0.0/8 that were not DNATed,
    /// CVE-2020-8558). A failure is logged: the loopback NodePorts then do not answer.
    async fn enable_route_localnet(&mut self) {
        const KEY: &str = "net.ipv4.conf.all.route_localnet";
        let result = if self.commands.sysctl.is_empty() {
            tokio::fs::write("/proc/sys/net/ipv4/conf/all/route_localnet", b"1\n")
                .await
                .map_err(|error| error.to_string())
        } else {
            let (program, base) = split(&self.commands.sysctl);
            match Command::new(program)
                .args(base)
                .args(["-q", "-w", &format!("{KEY}=1")])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .await
            {
                Ok(output) if output.status.success() => Ok(()),
                Ok(output) => Err(String::from_utf8_lossy(&output.stderr).trim().to_owned()),
                Err(error) => Err(error.to_string()),
            }
        };
        match result {
            Ok(()) => {
                tracing::info!(
                    sysctl = KEY,
                    "set to 1 so NodePorts on loopback addresses reach endpoints off the node"
                );
                self.route_localnet = true;
            }
            Err(error) => tracing::warn!(
                sysctl = KEY,
                %error,
                "cannot enable route_localnet: NodePorts on loopback addresses reach only \
                 endpoints on this node"
            ),
        }
    }

    /// Starts an `nft monitor` that reports changes someone else makes to this backend's
    /// tables ([`monitor`]). Must be called inside a tokio runtime.
    pub fn monitor(&self) -> ChangeMonitor {
        let table = &self.config.table;
        ChangeMonitor::start(
            self.commands.nft.clone(),
            vec![("ip", table.clone()), ("ip6", table.clone())],
            self.writers.clone(),
        )
    }

    /// True once a sync committed a table this backend can check ([`NftBackend::verify`]).
    pub fn verifiable(&self) -> bool {
        self.families
            .iter()
            .any(|(_, state)| state.committed.is_some())
    }

    /// Elements the committed tables hold (what a full check lists).
    pub fn committed_elements(&self) -> usize {
        self.families
            .iter()
            .filter_map(|(_, state)| state.committed.as_ref())
            .map(|table| {
                table
                    .ruleset()
                    .elements
                    .values()
                    .map(BTreeMap::len)
                    .sum::<usize>()
            })
            .sum()
    }

    /// The cheap check ([`verify`]): each family's table still has the chains this backend
    /// last committed, and no other. `nft -j list chains` lists no rule and no element, so it
    /// costs the same at any number of Services.
    pub async fn verify_chains(&mut self) -> Result<Vec<Finding>, NftError> {
        let mut findings = Vec::new();
        for (family, state) in &self.families {
            let Some(table) = &state.committed else {
                continue;
            };
            let prefix = format!("{} {}", family.keyword(), self.config.table);
            let json = list_chains(&self.commands.nft, family.keyword()).await?;
            let listed =
                verify::chains(&json, &self.config.table).map_err(|error| NftError::Listing {
                    detail: format!("unreadable nft -j output: {error}"),
                })?;
            let skeleton = render::skeleton(*family, &self.config, table.capacities());
            let expected = verify::Expected::new(&skeleton, &prefix, table.ruleset());
            findings.extend(verify::compare_chains(*family, &prefix, &expected, &listed));
        }
        Ok(findings)
    }

    /// Compares each family's table in the kernel with what this backend last committed
    /// ([`verify`]); returns what differs. A family whose last sync failed (nothing known to
    /// be committed) is not checked: its retry recreates the table anyway.
    pub async fn verify(&mut self) -> Result<Vec<Finding>, NftError> {
        let mut findings = Vec::new();
        for (family, state) in &mut self.families {
            let Some(table) = &state.committed else {
                continue;
            };
            let prefix = format!("{} {}", family.keyword(), self.config.table);
            let json = list_table(&self.commands.nft, family.keyword(), &self.config.table).await?;
            let listing = match json.as_deref().map(verify::parse).transpose() {
                Ok(listing) => listing,
                Err(error) => {
                    // nft listed the table but cannot print it as JSON: it holds something this
                    // backend never writes (nft 1.0.6 breaks on a table `flags owner`).
                    state.fingerprint = None;
                    findings.push(Finding {
                        table: prefix.clone(),
                        family: *family,
                        reason: RepairReason::Changed,
                        details: vec![format!("nft -j lists the table as invalid JSON: {error}")],
                    });
                    continue;
                }
            };
            let skeleton = render::skeleton(*family, &self.config, table.capacities());
            let expected = verify::Expected::new(&skeleton, &prefix, table.ruleset());
            match verify::compare(
                *family,
                &prefix,
                &expected,
                listing.as_ref(),
                state.fingerprint,
            ) {
                Some(finding) => {
                    state.fingerprint = None;
                    findings.push(finding);
                }
                None => state.fingerprint = listing.map(|listing| listing.fingerprint),
            }
        }
        Ok(findings)
    }

    /// Writes again, in one transaction that recreates them, the tables of `families` as this
    /// backend last committed them: nothing is rendered from the Services. On error the
    /// next sync recreates every table from the Services.
    pub async fn restore(&mut self, families: &[Family]) -> Result<(), NftError> {
        let mut text = String::new();
        for (family, state) in &mut self.families {
            let Some(table) = state
                .committed
                .as_mut()
                .filter(|_| families.contains(family))
            else {
                continue;
            };
            table.redeclare();
            text.push_str(&render::diff(None, table.ruleset(), *family, &self.config));
            state.fingerprint = None;
        }
        if text.is_empty() {
            return Ok(());
        }
        let run = run_transaction(
            &mut self.context,
            &mut self.no_library,
            &self.commands.nft,
            &self.writers,
            &text,
            true,
        );
        if let Err(error) = run.await {
            self.force_full_sync();
            self.compare_all = true;
            return Err(error);
        }
        Ok(())
    }

    /// Deletes UDP conntrack entries that point at endpoints that went away, and the entries of
    /// frontends that just got endpoints (created while traffic was rejected). Failures are
    /// logged: conntrack exits 1 when nothing matched.
    async fn clear_conntrack(&self, cleanup: &render::UdpCleanup) -> usize {
        let Some(prefix) = &self.commands.conntrack else {
            return 0;
        };
        let mut runs = Vec::new();
        for endpoint in &cleanup.gone_endpoints {
            runs.push(vec![
                "-D".to_owned(),
                "-p".into(),
                "udp".into(),
                "-f".into(),
                family_flag(endpoint.ip).into(),
                "--reply-src".into(),
                endpoint.ip.to_string(),
                "--reply-port-src".into(),
                endpoint.port.to_string(),
            ]);
        }
        for (ip, port) in &cleanup.revived_frontends {
            let mut args = vec!["-D".to_owned(), "-p".into(), "udp".into()];
            if let Some(ip) = ip {
                args.extend([
                    "-f".to_owned(),
                    family_flag(*ip).to_owned(),
                    "--orig-dst".into(),
                    ip.to_string(),
                ]);
            }
            args.extend(["--orig-port-dst".to_owned(), port.to_string()]);
            runs.push(args);
        }
        let (program, base) = split(prefix);
        for args in &runs {
            let result = Command::new(program)
                .args(base)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await;
            if let Err(error) = result {
                tracing::warn!(%error, "running conntrack failed");
            }
        }
        runs.len()
    }
}

/// Runs one transaction: in the kept libnftables context when it is incremental, small, and nft
/// runs in this process's own network namespace (the command is plain `nft`), else with the
/// `nft` program.
async fn run_transaction(
    context: &mut Option<libnft::Context>,
    no_library: &mut bool,
    nft: &[String],
    writers: &monitor::Writers,
    text: &str,
    full: bool,
) -> Result<(), NftError> {
    if !full && nft == ["nft"] && text.len() <= IN_PROCESS_MAX_BYTES && !*no_library {
        if context.is_none() {
            *context = libnft::Context::new();
            *no_library = context.is_none();
        }
        if let Some(context) = context {
            return context
                .run(text)
                .map_err(|stderr| NftError::Rejected { stderr });
        }
    }
    run_script_as(nft, text, Some(writers)).await
}

/// `nft -j list chains <family>`: the chains of every table of the family, without rules.
async fn list_chains(nft: &[String], family: &str) -> Result<String, NftError> {
    let (program, args) = split(nft);
    let output = Command::new(program)
        .args(args)
        .args(["-j", "list", "chains", family])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|source| NftError::Spawn {
            program: program.to_owned(),
            source,
        })?;
    if !output.status.success() {
        return Err(NftError::Listing {
            detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    String::from_utf8(output.stdout).map_err(|_| NftError::Listing {
        detail: "nft -j list printed invalid UTF-8".into(),
    })
}

/// `nft -j list table <family> <table>`; `None` when the table does not exist.
pub(crate) async fn list_table(
    nft: &[String],
    family: &str,
    table: &str,
) -> Result<Option<String>, NftError> {
    let (program, args) = split(nft);
    let output = Command::new(program)
        .args(args)
        .args(["-j", "list", "table", family, table])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|source| NftError::Spawn {
            program: program.to_owned(),
            source,
        })?;
    if output.status.success() {
        return String::from_utf8(output.stdout)
            .map(Some)
            .map_err(|_| NftError::Listing {
                detail: "nft -j list printed invalid UTF-8".into(),
            });
    }
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    // What nft says for a table that does not exist (ENOENT from the kernel).
    if stderr.contains("No such file or directory") {
        return Ok(None);
    }
    Err(NftError::Listing { detail: stderr })
}

fn family_flag(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() { "ipv4" } else { "ipv6" }
}

/// Runs `text` as one `nft -f -` transaction with the command prefix `nft` (empty: `nft`),
/// recording the child in `writers` before it is given the transaction (so the change monitor
/// knows the write for its own). Shared by the nftables backend and the userspace backend's
/// capture table.
pub(crate) async fn run_script_as(
    nft: &[String],
    text: &str,
    writers: Option<&monitor::Writers>,
) -> Result<(), NftError> {
    let (program, args) = split(nft);
    let spawn_error = |source| NftError::Spawn {
        program: program.to_owned(),
        source,
    };
    let mut child = Command::new(program)
        .args(args)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(spawn_error)?;
    if let (Some(writers), Some(pid)) = (writers, child.id()) {
        writers.record(pid);
    }
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .await
            .map_err(spawn_error)?;
        // Closing stdin ends nft's input.
    }
    let output = child.wait_with_output().await.map_err(spawn_error)?;
    if output.status.success() {
        Ok(())
    } else {
        Err(NftError::Rejected {
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

fn split(command: &[String]) -> (&str, &[String]) {
    match command.split_first() {
        Some((program, args)) => (program.as_str(), args),
        None => ("nft", &[]),
    }
}
