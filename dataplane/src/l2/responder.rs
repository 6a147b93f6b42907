//! The ARP and NDP responder of one interface: answers requests for the addresses this node
//! announces (and for nothing else) and sends gratuitous ARP / unsolicited NA on takeover.

use std::collections::BTreeSet;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::packet::{self, ETHERTYPE_ARP, ETHERTYPE_IPV6, Mac};
use super::socket::{NEIGHBOR_SOLICITATION_FILTER, PacketSocket};

/// The addresses announced right now (shared by every interface's responder).
pub type Announced = Arc<BTreeSet<IpAddr>>;

/// When announcements are repeated after a takeover: the first frame may be lost, and a
/// neighbour may still be resolving through the old owner when the first one arrives.
pub const ANNOUNCE_SCHEDULE: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_millis(250),
    Duration::from_millis(1000),
];

/// A network interface as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Its name.
    pub name: String,
    /// Its index.
    pub ifindex: u32,
    /// Its MAC address.
    pub mac: Mac,
}

/// The interfaces whose whole name matches `selector`, that are up and have an Ethernet address
/// (loopback never does). Read from `/sys/class/net` of this process's network namespace.
pub fn interfaces(selector: &Regex) -> Vec<Interface> {
    let Ok(entries) = std::fs::read_dir("/sys/class/net") else {
        return Vec::new();
    };
    let mut found: Vec<Interface> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let whole = selector
                .find(&name)
                .is_some_and(|m| m.start() == 0 && m.end() == name.len());
            if !whole || name == "lo" {
                return None;
            }
            let read = |file: &str| std::fs::read_to_string(entry.path().join(file)).ok();
            let ifindex = read("ifindex")?.trim().parse().ok()?;
            let mac = packet::parse_mac(&read("address")?)?;
            let up = read("operstate").is_some_and(|state| state.trim() != "down");
            (up && mac != [0; 6]).then_some(Interface { name, ifindex, mac })
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// The responder of one interface; stops when dropped.
#[derive(Debug)]
pub struct Responder {
    interface: Interface,
    arp: Arc<PacketSocket>,
    ndp: Arc<PacketSocket>,
    tasks: Vec<JoinHandle<()>>,
}

impl Responder {
    /// Opens the interface's ARP and NDP sockets and starts answering for `announced`.
    pub fn start(interface: Interface, announced: watch::Receiver<Announced>) -> io::Result<Self> {
        let arp = Arc::new(PacketSocket::open(
            interface.ifindex,
            ETHERTYPE_ARP,
            None,
            false,
        )?);
        let ndp = Arc::new(PacketSocket::open(
            interface.ifindex,
            ETHERTYPE_IPV6,
            Some(&NEIGHBOR_SOLICITATION_FILTER),
            true,
        )?);
        let tasks = vec![
            tokio::spawn(answer(
                arp.clone(),
                interface.clone(),
                announced.clone(),
                |frame, mac, announced| {
                    let request = packet::parse_arp_request(frame)?;
                    announced
                        .contains(&IpAddr::V4(request.target_ip))
                        .then(|| packet::arp_reply(mac, &request))
                },
            )),
            tokio::spawn(answer(
                ndp.clone(),
                interface.clone(),
                announced,
                |frame, mac, announced| {
                    let solicitation = packet::parse_neighbor_solicitation(frame)?;
                    announced
                        .contains(&IpAddr::V6(solicitation.target))
                        .then(|| packet::neighbor_advertisement(mac, &solicitation))
                },
            )),
        ];
        tracing::info!(interface = %interface.name, ifindex = interface.ifindex, "answering ARP and NDP");
        Ok(Responder {
            interface,
            arp,
            ndp,
            tasks,
        })
    }

    /// The interface it answers on.
    pub fn interface(&self) -> &Interface {
        &self.interface
    }

    /// Tells the segment that `ips` are now here: gratuitous ARP for IPv4, unsolicited NA for
    /// IPv6, repeated on [`ANNOUNCE_SCHEDULE`]; stops early when an address is no longer
    /// announced by the time a repetition is due.
    pub fn announce(&self, ips: Vec<IpAddr>, announced: watch::Receiver<Announced>) {
        if ips.is_empty() {
            return;
        }
        let (arp, ndp, interface) = (self.arp.clone(), self.ndp.clone(), self.interface.clone());
        tokio::spawn(async move {
            let mut previous = Duration::ZERO;
            for at in ANNOUNCE_SCHEDULE {
                tokio::time::sleep(at.saturating_sub(previous)).await;
                previous = at;
                let current = announced.borrow().clone();
                for ip in ips.iter().filter(|ip| current.contains(ip)) {
                    let result = match ip {
                        IpAddr::V4(v4) => arp.send(&packet::gratuitous_arp(interface.mac, *v4)),
                        IpAddr::V6(v6) => {
                            ndp.send(&packet::unsolicited_advertisement(interface.mac, *v6))
                        }
                    };
                    if let Err(error) = result {
                        tracing::warn!(interface = %interface.name, %ip, %error, "announcement not sent");
                    }
                }
            }
        });
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

type Answer = fn(&[u8], Mac, &BTreeSet<IpAddr>) -> Option<Vec<u8>>;

async fn answer(
    socket: Arc<PacketSocket>,
    interface: Interface,
    announced: watch::Receiver<Announced>,
    respond: Answer,
) {
    let mut buffer = vec![0u8; 2048];
    loop {
        let length = match socket.recv(&mut buffer).await {
            Ok(length) => length,
            Err(error) => {
                tracing::warn!(interface = %interface.name, %error, "receiving on the packet socket");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let frame = buffer.get(..length).unwrap_or_default();
        // Our own frames echoed back by a bridge are not questions.
        if frame.get(6..12) == Some(&interface.mac[..]) {
            continue;
        }
        let reply = {
            let current = announced.borrow();
            respond(frame, interface.mac, &current)
        };
        if let Some(Err(error)) = reply.map(|reply| socket.send(&reply)) {
            tracing::warn!(interface = %interface.name, %error, "reply not sent");
        }
    }
}
