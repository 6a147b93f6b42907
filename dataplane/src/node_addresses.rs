//! The node's own addresses that serve NodePorts (`--nodeport-addresses`).
//!
//! As the seeds say, the flag filters the node's *interfaces*: empty means every local address,
//! and `127.0.0.0/8` means the loopback interface only. The addresses are read from the kernel
//! (`getifaddrs`, or `ip -j addr show` inside another network namespace) and followed while the
//! proxy runs, so an address added or removed later (DHCP, a failover VIP) gains or loses its
//! NodePorts within one poll.
//!
//! Why polling: one `getifaddrs` every [`DEFAULT_POLL`] is a single netlink dump, negligible next
//! to a sync, and needs no long-lived netlink socket or message parsing of our own; address
//! changes on a node are rare and a couple of seconds of delay is what kube-proxy's own periodic
//! resync gives.
//!
//! IPv6 link-local addresses (fe80::/10) are never selected: they are only meaningful with an
//! interface scope, which neither a socket address nor an nftables set element of this dataplane
//! carries.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use tokio::process::Command;
use tokio::sync::watch;

/// How often [`follow`] re-reads the addresses.
pub const DEFAULT_POLL: Duration = Duration::from_secs(2);

/// Errors reading the node's addresses.
#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    /// The kernel query (or the `ip` program) failed.
    #[error("reading interface addresses: {0}")]
    Io(#[from] std::io::Error),
    /// `ip` failed or printed something that is not its JSON address list.
    #[error("reading interface addresses with ip: {0}")]
    Ip(String),
}

/// Where the addresses come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressSource {
    /// This process's network namespace.
    Local,
    /// Another network namespace, through `ip -n NAME -j addr show` (tests, `--netns`).
    Netns(String),
}

impl AddressSource {
    /// Every address of every interface.
    pub async fn read(&self) -> Result<Vec<IpAddr>, AddressError> {
        match self {
            AddressSource::Local => {
                let interfaces = tokio::task::spawn_blocking(if_addrs::get_if_addrs)
                    .await
                    .map_err(|error| AddressError::Ip(error.to_string()))??;
                Ok(interfaces.iter().map(if_addrs::Interface::ip).collect())
            }
            AddressSource::Netns(name) => {
                let output = Command::new("ip")
                    .args(["-n", name, "-j", "addr", "show"])
                    .output()
                    .await?;
                if !output.status.success() {
                    return Err(AddressError::Ip(
                        String::from_utf8_lossy(&output.stderr).trim().to_owned(),
                    ));
                }
                parse_ip_json(&String::from_utf8_lossy(&output.stdout))
            }
        }
    }
}

/// Addresses in the JSON `ip -j addr show` prints.
pub fn parse_ip_json(text: &str) -> Result<Vec<IpAddr>, AddressError> {
    let links: serde_json::Value =
        serde_json::from_str(text).map_err(|error| AddressError::Ip(error.to_string()))?;
    let links = links
        .as_array()
        .ok_or_else(|| AddressError::Ip("not a JSON array".into()))?;
    let mut out = Vec::new();
    for link in links {
        let infos = link.get("addr_info").and_then(serde_json::Value::as_array);
        for info in infos.into_iter().flatten() {
            if let Some(ip) = info
                .get("local")
                .and_then(serde_json::Value::as_str)
                .and_then(|local| local.parse().ok())
            {
                out.push(ip);
            }
        }
    }
    Ok(out)
}

/// The addresses that serve NodePorts: those inside `cidrs` (all when empty), sorted, without
/// duplicates and without IPv6 link-local addresses.
pub fn select(addresses: &[IpAddr], cidrs: &[IpNet]) -> Vec<IpAddr> {
    let link_local =
        |ip: &IpAddr| matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
    addresses
        .iter()
        .copied()
        .filter(|ip| !link_local(ip))
        .filter(|ip| cidrs.is_empty() || cidrs.iter().any(|cidr| cidr.contains(ip)))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The selected addresses, kept current by a background poll.
#[derive(Debug)]
pub struct NodeAddresses {
    receiver: watch::Receiver<Vec<IpAddr>>,
    task: tokio::task::JoinHandle<()>,
}

impl NodeAddresses {
    /// A receiver that sees every change of the selection.
    pub fn subscribe(&self) -> watch::Receiver<Vec<IpAddr>> {
        self.receiver.clone()
    }

    /// The current selection.
    pub fn current(&self) -> Vec<IpAddr> {
        self.receiver.borrow().clone()
    }
}

impl Drop for NodeAddresses {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn list(addresses: &[IpAddr]) -> String {
    addresses
        .iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Reads the addresses once (an error here is an error of the caller's start), logs which serve
/// NodePorts, then polls every `poll` and logs each change. A failed poll keeps the last good
/// selection.
pub async fn follow(
    source: AddressSource,
    cidrs: Vec<IpNet>,
    poll: Duration,
) -> Result<NodeAddresses, AddressError> {
    let first = select(&source.read().await?, &cidrs);
    let filter = if cidrs.is_empty() {
        "all local addresses".to_owned()
    } else {
        cidrs
            .iter()
            .map(IpNet::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    if first.is_empty() {
        tracing::warn!(nodeport_addresses = %filter, "no local address serves NodePorts");
    } else {
        tracing::info!(nodeport_addresses = %filter, addresses = %list(&first), "NodePorts served on these addresses");
    }
    let (sender, receiver) = watch::channel(first);
    let task = tokio::spawn(async move {
        let mut ticker = tokio::time::interval(poll);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                () = sender.closed() => return,
                _ = ticker.tick() => {}
            }
            let now = match source.read().await {
                Ok(all) => select(&all, &cidrs),
                Err(error) => {
                    tracing::warn!(%error, "cannot read interface addresses; keeping the last ones");
                    continue;
                }
            };
            let before = sender.borrow().clone();
            if now != before {
                let added: Vec<IpAddr> = now
                    .iter()
                    .filter(|ip| !before.contains(ip))
                    .copied()
                    .collect();
                let removed: Vec<IpAddr> = before
                    .iter()
                    .filter(|ip| !now.contains(ip))
                    .copied()
                    .collect();
                tracing::info!(
                    addresses = %list(&now),
                    added = %list(&added),
                    removed = %list(&removed),
                    "NodePort addresses changed"
                );
                sender.send_replace(now);
            }
        }
    });
    Ok(NodeAddresses { receiver, task })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(text: &[&str]) -> Vec<IpAddr> {
        text.iter().map(|ip| ip.parse().unwrap()).collect()
    }

    #[test]
    fn selection_follows_the_seed_rules() {
        let node = ips(&[
            "127.0.0.1",
            "10.0.0.11",
            "192.0.2.7",
            "::1",
            "fe80::1",
            "fd00::11",
            "10.0.0.11",
        ]);
        let cases: Vec<(&str, Vec<&str>, Vec<&str>)> = vec![
            (
                "empty flag: every local address but IPv6 link-local",
                vec![],
                vec!["10.0.0.11", "127.0.0.1", "192.0.2.7", "::1", "fd00::11"],
            ),
            (
                "the seed's 127.0.0.0/8: loopback only",
                vec!["127.0.0.0/8"],
                vec!["127.0.0.1"],
            ),
            (
                "the seed's 10.0.0.0/8, 192.0.2.0/25",
                vec!["10.0.0.0/8", "192.0.2.0/25"],
                vec!["10.0.0.11", "192.0.2.7"],
            ),
            ("IPv6 range", vec!["fd00::/8"], vec!["fd00::11"]),
            (
                "link-local never, even when asked",
                vec!["fe80::/10"],
                vec![],
            ),
            ("nothing matches", vec!["172.16.0.0/12"], vec![]),
        ];
        for (name, cidrs, want) in cases {
            let cidrs: Vec<IpNet> = cidrs.iter().map(|c| c.parse().unwrap()).collect();
            assert_eq!(select(&node, &cidrs), ips(&want), "{name}");
        }
    }

    #[test]
    fn parses_ip_json_output() {
        let text = r#"[
          {"ifindex":1,"ifname":"lo","addr_info":[
            {"family":"inet","local":"127.0.0.1","prefixlen":8},
            {"family":"inet6","local":"::1","prefixlen":128}]},
          {"ifindex":2,"ifname":"eth0","addr_info":[
            {"family":"inet","local":"10.0.0.11","prefixlen":24},
            {"family":"inet","local":"10.0.0.50","prefixlen":32}]},
          {"ifindex":3,"ifname":"down0","addr_info":[]}
        ]"#;
        assert_eq!(
            parse_ip_json(text).unwrap(),
            ips(&["127.0.0.1", "::1", "10.0.0.11", "10.0.0.50"])
        );
        assert!(parse_ip_json("{}").is_err());
        assert!(parse_ip_json("not json").is_err());
    }

    #[tokio::test]
    async fn this_hosts_loopback_is_found() {
        let all = AddressSource::Local.read().await.unwrap();
        assert!(all.contains(&"127.0.0.1".parse().unwrap()), "{all:?}");
    }
}
