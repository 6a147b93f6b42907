//! Capture rules of the userspace backend: how traffic for a Service's virtual address reaches a
//! proxy socket, as the seeds' userspace mode does it ("install rules that capture traffic to the
//! clusterIP and port and redirect it to the proxy port").
//!
//! Each captured frontend (ClusterIP, load-balancer IP or externalIP, with protocol and port) gets
//! its own *proxy port*: the proxy listens on the unspecified address at that port, and one
//! `inet` table (default `kube-lb-userspace`) rewrites the destination:
//! - `prerouting` (clients in pods or on other nodes): `redirect` to the proxy port, i.e. to the
//!   primary address of the interface the packet came in on;
//! - `output` (clients on the node itself): DNAT to the client's own source address and the proxy
//!   port. Not `redirect`, which would pick 127.0.0.1: a UDP reply from an unbound source address
//!   would then leave from the node address, miss the reverse NAT and reach the client from the
//!   wrong address.
//!
//! The rules are two verdict-free maps (`redirects-v4`/`-v6`: addr . proto . port → proxy port)
//! referenced by fixed rules, so a Service change is element updates only. Two more pieces keep
//! the kernel-mode behaviour clients rely on: frontends without endpoints are rejected
//! (`rejects-v4`/`-v6`, so clients see "connection refused" as in nftables mode instead of packets
//! leaving by the default route), and a new connection straight to a proxy port, not through the
//! capture, is dropped (`proxy-ports`).
//!
//! Why capture rather than a dummy interface holding the virtual IPs (IPVS mode's way): the seeds
//! describe capture; it adds no address to the node, so the node does not start answering ARP for
//! LB and external IPs or accept every port of a ClusterIP, and stale state is one table to delete.
//!
//! Rendering is pure ([`table_script`], [`diff_script`]); [`Capture`] runs `nft -f -`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use super::Frontend;
use crate::model::{Protocol, Snapshot};
use crate::nft::monitor::Writers;
use crate::nft::verify::{self, Expected};
use crate::nft::{ChangeMonitor, Family, Finding, NftError, Ruleset};

/// Default name of the capture table (family `inet`).
pub const DEFAULT_TABLE: &str = "kube-lb-userspace";

/// Where the capture rules go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureConfig {
    /// Table name (family `inet`).
    pub table: String,
    /// Command prefix that runs nft; `-f -` is appended.
    pub nft: Vec<String>,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            table: DEFAULT_TABLE.into(),
            nft: vec!["nft".into()],
        }
    }
}

/// Errors applying capture rules.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// nft could not be run.
    #[error("running {program}")]
    Spawn {
        /// Program name.
        program: String,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// nft refused the transaction; the previous rules are still in place.
    #[error("nft rejected the capture rules: {stderr}")]
    Rejected {
        /// What nft printed.
        stderr: String,
    },
}

/// What the capture table must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureState {
    /// Frontend → proxy port it is redirected to.
    pub redirects: BTreeMap<Frontend, u16>,
    /// Frontends without endpoints: rejected.
    pub rejects: BTreeSet<Frontend>,
}

impl CaptureState {
    fn proxy_ports(&self) -> BTreeSet<(Protocol, u16)> {
        self.redirects
            .iter()
            .map(|(frontend, port)| (frontend.protocol, *port))
            .collect()
    }
}

fn proto(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}

fn suffix(addr: SocketAddr) -> &'static str {
    if addr.is_ipv4() { "v4" } else { "v6" }
}

fn frontend_key(frontend: &Frontend) -> String {
    format!(
        "{} . {} . {}",
        frontend.addr.ip(),
        proto(frontend.protocol),
        frontend.addr.port()
    )
}

/// ClusterIP, load-balancer and external IP frontends without usable endpoints (they are
/// rejected, as nftables mode does). SCTP ports are left alone: this backend does not serve them.
pub fn without_endpoints(snapshot: &Snapshot) -> BTreeSet<Frontend> {
    let mut out = BTreeSet::new();
    for port in snapshot.ports.values() {
        if port.key.protocol == Protocol::Sctp {
            continue;
        }
        let frontend = |ip: &IpAddr| Frontend {
            protocol: port.key.protocol,
            addr: SocketAddr::new(*ip, port.key.port),
        };
        if port.internal_endpoints().is_empty() {
            out.extend(port.cluster_ips.iter().map(frontend));
        }
        if port.external_endpoints().is_empty() {
            out.extend(
                port.load_balancer_ips
                    .iter()
                    .chain(&port.external_ips)
                    .map(frontend),
            );
        }
    }
    out
}

/// nft text that deletes the table if it exists.
pub fn delete_script(table: &str) -> String {
    format!("add table inet {table}\ndelete table inet {table}\n")
}

/// nft text that (re)creates the empty table with its maps, sets and chains; whatever a previous
/// run left (a crash, a kill -9) is deleted in the same transaction.
pub fn table_script(table: &str) -> String {
    let mut out = delete_script(table);
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(format!("add table inet {table}"));
    for (family, addr) in [("v4", "ipv4_addr"), ("v6", "ipv6_addr")] {
        line(format!(
            "add map inet {table} redirects-{family} {{ type {addr} . inet_proto . inet_service : inet_service; }}"
        ));
        line(format!(
            "add set inet {table} rejects-{family} {{ type {addr} . inet_proto . inet_service; }}"
        ));
    }
    line(format!(
        "add set inet {table} proxy-ports {{ type inet_proto . inet_service; }}"
    ));
    let chain = |name: &str, kind: &str, hook: &str, priority: i32| {
        format!(
            "add chain inet {table} {name} {{ type {kind} hook {hook} priority {priority}; policy accept; }}"
        )
    };
    line(chain("prerouting", "nat", "prerouting", -100));
    line(chain("output", "nat", "output", -100));
    line(chain("guard", "filter", "input", 0));
    line(chain("reject-forward", "filter", "forward", 0));
    line(chain("reject-output", "filter", "output", 0));
    for (fam, family) in [("ip", "v4"), ("ip6", "v6")] {
        let lookup = format!("{fam} daddr . meta l4proto . th dport");
        line(format!(
            "add rule inet {table} prerouting meta l4proto {{ tcp, udp }} redirect to : {lookup} map @redirects-{family}"
        ));
        line(format!(
            "add rule inet {table} output meta l4proto {{ tcp, udp }} dnat {fam} to {fam} saddr : {lookup} map @redirects-{family}"
        ));
        for chain in ["reject-forward", "reject-output"] {
            line(format!(
                "add rule inet {table} {chain} {lookup} @rejects-{family} reject"
            ));
        }
    }
    line(format!(
        "add rule inet {table} guard ct state new ct status & dnat == 0 meta l4proto . th dport @proxy-ports drop"
    ));
    out
}

/// nft text that turns `old` into `new` (element updates only).
pub fn diff_script(table: &str, old: &CaptureState, new: &CaptureState) -> String {
    let mut out = String::new();
    // Deletions first: a frontend whose proxy port changed is deleted and added again.
    for (frontend, port) in &old.redirects {
        if new.redirects.get(frontend) != Some(port) {
            let _ = writeln!(
                out,
                "delete element inet {table} redirects-{} {{ {} }}",
                suffix(frontend.addr),
                frontend_key(frontend)
            );
        }
    }
    for frontend in old.rejects.difference(&new.rejects) {
        let _ = writeln!(
            out,
            "delete element inet {table} rejects-{} {{ {} }}",
            suffix(frontend.addr),
            frontend_key(frontend)
        );
    }
    let (old_ports, new_ports) = (old.proxy_ports(), new.proxy_ports());
    for (protocol, port) in old_ports.difference(&new_ports) {
        let _ = writeln!(
            out,
            "delete element inet {table} proxy-ports {{ {} . {port} }}",
            proto(*protocol)
        );
    }
    for (protocol, port) in new_ports.difference(&old_ports) {
        let _ = writeln!(
            out,
            "add element inet {table} proxy-ports {{ {} . {port} }}",
            proto(*protocol)
        );
    }
    for frontend in new.rejects.difference(&old.rejects) {
        let _ = writeln!(
            out,
            "add element inet {table} rejects-{} {{ {} }}",
            suffix(frontend.addr),
            frontend_key(frontend)
        );
    }
    for (frontend, port) in &new.redirects {
        if old.redirects.get(frontend) != Some(port) {
            let _ = writeln!(
                out,
                "add element inet {table} redirects-{} {{ {} : {port} }}",
                suffix(frontend.addr),
                frontend_key(frontend)
            );
        }
    }
    out
}

/// The capture table of one node, remembering what it committed so each sync is a diff.
#[derive(Debug)]
pub struct Capture {
    config: CaptureConfig,
    /// `None` until the table was created, and after a failed transaction (the next sync
    /// recreates it).
    committed: Option<CaptureState>,
    /// The `nft` children that wrote the table (see [`crate::nft::monitor`]).
    writers: Writers,
    /// Hash of the listing at the last check that found the table intact, when nothing was
    /// written since ([`crate::nft::verify`]).
    fingerprint: Option<u64>,
}

impl Capture {
    /// Nothing is written until the first [`Capture::sync`].
    pub fn new(config: CaptureConfig) -> Self {
        Capture {
            config,
            committed: None,
            writers: Writers::default(),
            fingerprint: None,
        }
    }

    /// Starts an `nft monitor` reporting someone else's changes to the table.
    pub fn monitor(&self) -> ChangeMonitor {
        ChangeMonitor::start(
            self.config.nft.clone(),
            vec![("inet", self.config.table.clone())],
            self.writers.clone(),
        )
    }

    /// True once the table was written: [`Capture::verify`] has something to compare.
    pub fn verifiable(&self) -> bool {
        self.committed.is_some()
    }

    /// Compares the kernel's table with what was last written: its chains and rules (those of
    /// [`table_script`]) and the elements of its maps and sets; `None` when it is intact.
    pub async fn verify(&mut self) -> Result<Option<Finding>, NftError> {
        let Some(committed) = &self.committed else {
            return Ok(None);
        };
        let table = &self.config.table;
        let name = format!("inet {table}");
        let json = crate::nft::list_table(&self.config.nft, "inet", table).await?;
        let listing = match json.as_deref().map(verify::parse).transpose() {
            Ok(listing) => listing,
            Err(error) => {
                self.fingerprint = None;
                return Ok(Some(Finding {
                    table: name,
                    family: Family::V4,
                    reason: verify::RepairReason::Changed,
                    details: vec![format!("nft -j lists the table as invalid JSON: {error}")],
                }));
            }
        };
        let mut expected = Expected::new(&table_script(table), &name, &Ruleset::default());
        for suffix in ["v4", "v6"] {
            let count = |frontends: &mut dyn Iterator<Item = &Frontend>| {
                frontends
                    .filter(|frontend| self::suffix(frontend.addr) == suffix)
                    .count()
            };
            expected.set_elements(
                &format!("redirects-{suffix}"),
                count(&mut committed.redirects.keys()),
            );
            expected.set_elements(
                &format!("rejects-{suffix}"),
                count(&mut committed.rejects.iter()),
            );
        }
        expected.set_elements("proxy-ports", committed.proxy_ports().len());
        let finding = verify::compare(
            Family::V4,
            &name,
            &expected,
            listing.as_ref(),
            self.fingerprint,
        );
        self.fingerprint = match (&finding, listing) {
            (None, Some(listing)) => Some(listing.fingerprint),
            _ => None,
        };
        Ok(finding)
    }

    /// Recreates the table as it was last written, in one transaction.
    pub async fn restore(&mut self) -> Result<(), CaptureError> {
        let Some(committed) = &self.committed else {
            return Ok(());
        };
        let table = &self.config.table;
        let text = table_script(table) + &diff_script(table, &CaptureState::default(), committed);
        self.fingerprint = None;
        if let Err(error) = run_nft(&self.config.nft, &text, &self.writers).await {
            self.committed = None;
            return Err(error);
        }
        Ok(())
    }

    /// Table name.
    pub fn table(&self) -> &str {
        &self.config.table
    }

    /// Brings the table to `desired` in one transaction; the first call (or the first after a
    /// failure) recreates the table, dropping whatever an earlier process left behind.
    pub async fn sync(&mut self, desired: &CaptureState) -> Result<usize, CaptureError> {
        let table = &self.config.table;
        let text = match &self.committed {
            Some(committed) => diff_script(table, committed, desired),
            None => table_script(table) + &diff_script(table, &CaptureState::default(), desired),
        };
        let lines = text.lines().count();
        if lines > 0 {
            self.fingerprint = None;
        }
        if lines > 0
            && let Err(error) = run_nft(&self.config.nft, &text, &self.writers).await
        {
            self.committed = None;
            return Err(error);
        }
        self.committed = Some(desired.clone());
        Ok(lines)
    }

    /// Deletes the table (the proxy is stopping), also one an earlier process left if this one
    /// never synced.
    pub async fn remove(&mut self) -> Result<(), CaptureError> {
        self.committed = None;
        let writers = self.writers.clone();
        run_nft(
            &self.config.nft,
            &delete_script(&self.config.table),
            &writers,
        )
        .await
    }
}

async fn run_nft(prefix: &[String], text: &str, writers: &Writers) -> Result<(), CaptureError> {
    crate::nft::run_script_as(prefix, text, Some(writers))
        .await
        .map_err(|error| match error {
            NftError::Spawn { program, source } => CaptureError::Spawn { program, source },
            NftError::Rejected { stderr } => CaptureError::Rejected { stderr },
            NftError::Listing { detail } => CaptureError::Rejected { stderr: detail },
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frontend(addr: &str, protocol: Protocol) -> Frontend {
        Frontend {
            protocol,
            addr: addr.parse().unwrap(),
        }
    }

    fn state(redirects: &[(&str, Protocol, u16)], rejects: &[(&str, Protocol)]) -> CaptureState {
        CaptureState {
            redirects: redirects
                .iter()
                .map(|(addr, protocol, port)| (frontend(addr, *protocol), *port))
                .collect(),
            rejects: rejects
                .iter()
                .map(|(addr, protocol)| frontend(addr, *protocol))
                .collect(),
        }
    }

    #[test]
    fn diffs_are_element_updates_only() {
        use Protocol::{Tcp, Udp};
        let empty = state(&[], &[]);
        let one = state(&[("10.96.0.1:80", Tcp, 40000)], &[]);
        let cases: Vec<(&str, CaptureState, CaptureState, Vec<&str>)> = vec![
            ("nothing to do", one.clone(), one.clone(), vec![]),
            (
                "first frontend",
                empty.clone(),
                one.clone(),
                vec![
                    "add element inet t proxy-ports { tcp . 40000 }",
                    "add element inet t redirects-v4 { 10.96.0.1 . tcp . 80 : 40000 }",
                ],
            ),
            (
                "Service gone",
                one.clone(),
                empty.clone(),
                vec![
                    "delete element inet t redirects-v4 { 10.96.0.1 . tcp . 80 }",
                    "delete element inet t proxy-ports { tcp . 40000 }",
                ],
            ),
            (
                "endpoints gone: redirect becomes reject",
                one.clone(),
                state(&[], &[("10.96.0.1:80", Tcp)]),
                vec![
                    "delete element inet t redirects-v4 { 10.96.0.1 . tcp . 80 }",
                    "delete element inet t proxy-ports { tcp . 40000 }",
                    "add element inet t rejects-v4 { 10.96.0.1 . tcp . 80 }",
                ],
            ),
            (
                "IPv6 UDP frontend",
                empty.clone(),
                state(&[("[fd00::10]:53", Udp, 41000)], &[]),
                vec![
                    "add element inet t proxy-ports { udp . 41000 }",
                    "add element inet t redirects-v6 { fd00::10 . udp . 53 : 41000 }",
                ],
            ),
            (
                "proxy port changed",
                one.clone(),
                state(&[("10.96.0.1:80", Tcp, 40001)], &[]),
                vec![
                    "delete element inet t redirects-v4 { 10.96.0.1 . tcp . 80 }",
                    "delete element inet t proxy-ports { tcp . 40000 }",
                    "add element inet t proxy-ports { tcp . 40001 }",
                    "add element inet t redirects-v4 { 10.96.0.1 . tcp . 80 : 40001 }",
                ],
            ),
        ];
        for (name, old, new, want) in cases {
            let got = diff_script("t", &old, &new);
            assert_eq!(got.lines().collect::<Vec<_>>(), want, "{name}");
        }
    }

    #[test]
    fn the_table_is_recreated_in_one_transaction() {
        let script = table_script("t");
        let lines: Vec<&str> = script.lines().collect();
        assert_eq!(
            lines[..3],
            [
                "add table inet t",
                "delete table inet t",
                "add table inet t"
            ]
        );
        for hook in ["prerouting", "output"] {
            assert!(
                lines
                    .iter()
                    .any(|l| l.contains(&format!("type nat hook {hook} priority -100"))),
                "{script}"
            );
        }
        assert_eq!(
            delete_script("t"),
            "add table inet t\ndelete table inet t\n"
        );
    }
}
