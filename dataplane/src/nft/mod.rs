//! nftables backend: a pure renderer ([`render`]) and a thin applier that pipes one transaction
//! per sync into `nft -f -`, remembering what it committed so the next sync is a diff.

pub mod render;

use std::net::IpAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

pub use render::{Family, GroupIds, NftConfig, NftScheduler, Ruleset};

use crate::model::Snapshot;

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
    committed: Option<Ruleset>,
}

/// The nftables dataplane of one node: one table per family.
#[derive(Debug)]
pub struct NftBackend {
    config: NftConfig,
    commands: Commands,
    families: Vec<(Family, FamilyState)>,
    last_snapshot: Snapshot,
    /// `net.ipv4.conf.all.route_localnet` was set to 1 by this backend.
    route_localnet: bool,
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
            last_snapshot: Snapshot::default(),
            route_localnet: false,
        }
    }

    /// Forces the next sync to recreate the tables (after a failure, or periodically).
    pub fn force_full_sync(&mut self) {
        for (_, state) in &mut self.families {
            state.committed = None;
        }
    }

    /// The text the next sync would send, without applying it (for tests and `--dry-run`).
    pub fn plan(&mut self, snapshot: &Snapshot) -> String {
        let mut text = String::new();
        for (family, state) in &mut self.families {
            let mut ids = state.ids.clone();
            let (ruleset, _) = render::render(snapshot, *family, &self.config, &mut ids);
            text.push_str(&render::diff(
                state.committed.as_ref(),
                &ruleset,
                *family,
                &self.config,
            ));
        }
        text
    }

    /// Brings the kernel to `snapshot` in one atomic transaction covering both families, then
    /// clears stale UDP conntrack entries. On error nothing was changed and the next sync is full.
    pub async fn sync(&mut self, snapshot: &Snapshot) -> Result<SyncReport, NftError> {
        let mut report = SyncReport::default();
        let mut text = String::new();
        let mut rendered = Vec::new();
        for (family, state) in &mut self.families {
            let mut ids = state.ids.clone();
            let (ruleset, warnings) = render::render(snapshot, *family, &self.config, &mut ids);
            report.warnings.extend(warnings);
            report.full |= state.committed.is_none();
            text.push_str(&render::diff(
                state.committed.as_ref(),
                &ruleset,
                *family,
                &self.config,
            ));
            rendered.push((ruleset, ids));
        }
        report.commands = text.lines().count();
        if !self.route_localnet
            && snapshot
                .nodeport_addresses
                .iter()
                .any(|ip| ip.is_ipv4() && ip.is_loopback())
        {
            self.enable_route_localnet().await;
        }
        if report.commands > 0 {
            let started = Instant::now();
            if let Err(error) = self.run_nft(&text).await {
                self.force_full_sync();
                return Err(error);
            }
            report.nft_time = started.elapsed();
        }
        for ((_, state), (ruleset, ids)) in self.families.iter_mut().zip(rendered) {
            state.committed = Some(ruleset);
            state.ids = ids;
        }
        let cleanup = render::udp_cleanup(&self.last_snapshot, snapshot);
        self.last_snapshot = snapshot.clone();
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

    async fn run_nft(&self, text: &str) -> Result<(), NftError> {
        run_script(&self.commands.nft, text).await
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

fn family_flag(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() { "ipv4" } else { "ipv6" }
}

/// Runs `text` as one `nft -f -` transaction with the command prefix `nft` (empty: `nft`).
/// Shared by the nftables backend and the userspace backend's capture table.
pub(crate) async fn run_script(nft: &[String], text: &str) -> Result<(), NftError> {
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
