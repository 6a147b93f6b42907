//! The address pool of the `local` provider: a pure allocator over configured ranges.
//!
//! Allocation hands out the lowest free address, so results are deterministic and easy to
//! predict in tests and demos. Every address belongs to at most one Service at a time.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::time::SystemTime;

use ipnet::IpNet;
use kube_lb_annotations::ServiceKey;

/// The default pool: inside 127.0.0.0/8 so it works on any Linux machine without configuration,
/// and away from 127.0.0.1 and the low 127.0.x.y addresses other tools use.
pub const DEFAULT_POOL: &str = "127.240.0.0/16";

/// An inclusive range of addresses of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    start: IpAddr,
    end: IpAddr,
}

/// Why a pool range or an allocation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// A range could not be parsed.
    #[error("invalid address range {input:?}: expected a CIDR (127.240.0.0/16) or FIRST-LAST")]
    InvalidRange {
        /// What was given.
        input: String,
    },
    /// The pool has no ranges.
    #[error("the address pool is empty")]
    Empty,
    /// The requested address is outside every range of the pool.
    #[error("loadBalancerIP {ip} is not in the local address pool ({pool})")]
    OutsidePool {
        /// The requested address.
        ip: IpAddr,
        /// The pool, for the message.
        pool: String,
    },
    /// The requested address belongs to another Service.
    #[error("loadBalancerIP {ip} is already in use by Service {owner}")]
    InUse {
        /// The requested address.
        ip: IpAddr,
        /// Who holds it.
        owner: String,
    },
    /// Every address is allocated.
    #[error("the local address pool ({pool}) is exhausted")]
    Exhausted {
        /// The pool, for the message.
        pool: String,
    },
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn same_family(template: IpAddr, value: u128) -> IpAddr {
    match template {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(u32::try_from(value).unwrap_or(u32::MAX))),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

impl IpRange {
    /// An inclusive range; `None` when the families differ or `start > end`.
    pub fn new(start: IpAddr, end: IpAddr) -> Option<Self> {
        (start.is_ipv4() == end.is_ipv4() && to_u128(start) <= to_u128(end))
            .then_some(Self { start, end })
    }

    /// The usable addresses of a CIDR: without the network and broadcast addresses when the
    /// IPv4 prefix leaves room for them, as most tooling expects.
    pub fn from_cidr(net: IpNet) -> Self {
        let (mut start, mut end) = (to_u128(net.network()), to_u128(net.broadcast()));
        if let IpNet::V4(v4) = net
            && v4.prefix_len() < 31
        {
            start += 1;
            end -= 1;
        }
        Self {
            start: same_family(net.network(), start),
            end: same_family(net.network(), end),
        }
    }

    /// True when `ip` is inside the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.start.is_ipv4()
            && (to_u128(self.start)..=to_u128(self.end)).contains(&to_u128(ip))
    }

    fn iter(&self) -> impl Iterator<Item = IpAddr> + '_ {
        (to_u128(self.start)..=to_u128(self.end)).map(|v| same_family(self.start, v))
    }
}

impl FromStr for IpRange {
    type Err = PoolError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || PoolError::InvalidRange {
            input: s.to_string(),
        };
        let s = s.trim();
        if let Ok(net) = s.parse::<IpNet>() {
            return Ok(Self::from_cidr(net));
        }
        if let Some((first, last)) = s.split_once('-') {
            let first = first.trim().parse().map_err(|_| invalid())?;
            let last = last.trim().parse().map_err(|_| invalid())?;
            return Self::new(first, last).ok_or_else(invalid);
        }
        let single: IpAddr = s.parse().map_err(|_| invalid())?;
        Ok(Self {
            start: single,
            end: single,
        })
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start)
        } else {
            write!(f, "{}-{}", self.start, self.end)
        }
    }
}

/// Allocations of addresses to Services.
#[derive(Debug, Clone)]
pub struct Pool {
    ranges: Vec<IpRange>,
    owners: BTreeMap<IpAddr, ServiceKey>,
    by_service: HashMap<ServiceKey, IpAddr>,
    /// When this process handed each address out; absent for adopted addresses (their
    /// allocation happened in an earlier process, and no record of when survives).
    allocated_at: HashMap<ServiceKey, SystemTime>,
}

/// One address held by a Service, as [`Pool::allocations`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// The Service holding the address.
    pub service: ServiceKey,
    /// The address.
    pub ip: IpAddr,
    /// When this process allocated it; `None` when it was adopted from a Service status.
    pub allocated_at: Option<SystemTime>,
}

impl Pool {
    /// A pool over `ranges`.
    pub fn new(ranges: Vec<IpRange>) -> Result<Self, PoolError> {
        if ranges.is_empty() {
            return Err(PoolError::Empty);
        }
        Ok(Self {
            ranges,
            owners: BTreeMap::new(),
            by_service: HashMap::new(),
            allocated_at: HashMap::new(),
        })
    }

    /// The pool over [`DEFAULT_POOL`].
    pub fn default_loopback() -> Self {
        Self {
            // DEFAULT_POOL without its network and broadcast addresses.
            ranges: vec![IpRange {
                start: IpAddr::V4(Ipv4Addr::new(127, 240, 0, 1)),
                end: IpAddr::V4(Ipv4Addr::new(127, 240, 255, 254)),
            }],
            owners: BTreeMap::new(),
            by_service: HashMap::new(),
            allocated_at: HashMap::new(),
        }
    }

    fn describe(&self) -> String {
        self.ranges
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// True when `ip` is inside one of the ranges.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.contains(ip))
    }

    /// The address held by `service`, if any.
    pub fn get(&self, service: &ServiceKey) -> Option<IpAddr> {
        self.by_service.get(service).copied()
    }

    /// Number of allocated addresses.
    pub fn allocated(&self) -> usize {
        self.owners.len()
    }

    fn check_requested(&self, service: &ServiceKey, ip: IpAddr) -> Result<(), PoolError> {
        if !self.contains(ip) {
            return Err(PoolError::OutsidePool {
                ip,
                pool: self.describe(),
            });
        }
        match self.owners.get(&ip) {
            Some(owner) if owner != service => Err(PoolError::InUse {
                ip,
                owner: owner.to_string(),
            }),
            _ => Ok(()),
        }
    }

    fn assign(&mut self, service: &ServiceKey, ip: IpAddr, at: Option<SystemTime>) {
        if let Some(old) = self.by_service.insert(service.clone(), ip)
            && old != ip
        {
            self.owners.remove(&old);
            self.allocated_at.remove(service);
        }
        self.owners.insert(ip, service.clone());
        if let Some(at) = at {
            self.allocated_at.entry(service.clone()).or_insert(at);
        }
    }

    /// The address [`Pool::allocate`] would give `service` now, without allocating it: the
    /// same checks and the same choice, so a plan shows exactly what an ensure would do.
    pub fn would_allocate(
        &self,
        service: &ServiceKey,
        requested: Option<IpAddr>,
    ) -> Result<IpAddr, PoolError> {
        if let Some(ip) = requested {
            self.check_requested(service, ip)?;
            return Ok(ip);
        }
        if let Some(ip) = self.get(service) {
            return Ok(ip);
        }
        self.ranges
            .iter()
            .flat_map(IpRange::iter)
            .find(|ip| !self.owners.contains_key(ip))
            .ok_or_else(|| PoolError::Exhausted {
                pool: self.describe(),
            })
    }

    /// Gives `service` an address: `requested` when set (it must be in the pool and not held by
    /// another Service), else the one it already holds, else the lowest free one. On error the
    /// Service keeps what it had.
    pub fn allocate(
        &mut self,
        service: &ServiceKey,
        requested: Option<IpAddr>,
    ) -> Result<IpAddr, PoolError> {
        let ip = self.would_allocate(service, requested)?;
        self.assign(service, ip, Some(SystemTime::now()));
        Ok(ip)
    }

    /// Records that `service` already holds `ip` (read back from its status after a restart).
    /// Fails, changing nothing, when `ip` is outside the pool or held by another Service.
    pub fn adopt(&mut self, service: &ServiceKey, ip: IpAddr) -> Result<(), PoolError> {
        self.check_requested(service, ip)?;
        self.assign(service, ip, None);
        Ok(())
    }

    /// Frees the address of `service`, returning it.
    pub fn release(&mut self, service: &ServiceKey) -> Option<IpAddr> {
        let ip = self.by_service.remove(service)?;
        self.owners.remove(&ip);
        self.allocated_at.remove(service);
        Some(ip)
    }

    /// Every allocation, by address.
    pub fn allocations(&self) -> Vec<Allocation> {
        self.owners
            .iter()
            .map(|(ip, service)| Allocation {
                service: service.clone(),
                ip: *ip,
                allocated_at: self.allocated_at.get(service).copied(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ServiceKey {
        ServiceKey {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn pool(ranges: &[&str]) -> Pool {
        Pool::new(ranges.iter().map(|r| r.parse().unwrap()).collect()).unwrap()
    }

    #[test]
    fn parses_ranges() {
        let cases: [(&str, Option<(&str, &str)>); 7] = [
            ("127.240.0.0/16", Some(("127.240.0.1", "127.240.255.254"))),
            ("10.0.0.8/31", Some(("10.0.0.8", "10.0.0.9"))),
            ("10.0.0.8/32", Some(("10.0.0.8", "10.0.0.8"))),
            ("127.0.0.10-127.0.0.20", Some(("127.0.0.10", "127.0.0.20"))),
            ("127.0.0.7", Some(("127.0.0.7", "127.0.0.7"))),
            ("127.0.0.20-127.0.0.10", None),
            ("127.0.0.1-::1", None),
        ];
        for (input, want) in cases {
            let got = input.parse::<IpRange>().ok();
            let want = want.map(|(a, b)| IpRange::new(ip(a), ip(b)).unwrap());
            assert_eq!(got, want, "{input}");
        }
        assert!(matches!(
            "nonsense".parse::<IpRange>(),
            Err(PoolError::InvalidRange { .. })
        ));
        assert_eq!(Pool::new(vec![]).unwrap_err(), PoolError::Empty);
    }

    #[test]
    fn default_pool_avoids_127_0_0_1() {
        let mut p = Pool::default_loopback();
        assert_eq!(p.ranges, vec![DEFAULT_POOL.parse().unwrap()]);
        assert!(!p.contains(ip("127.0.0.1")));
        assert_eq!(p.allocate(&key("a"), None).unwrap(), ip("127.240.0.1"));
    }

    #[test]
    fn allocates_lowest_free_and_is_stable() {
        let mut p = pool(&["127.0.0.10-127.0.0.12", "127.0.1.1"]);
        assert_eq!(p.allocate(&key("a"), None), Ok(ip("127.0.0.10")));
        assert_eq!(p.allocate(&key("b"), None), Ok(ip("127.0.0.11")));
        // Asking again returns the same address.
        assert_eq!(p.allocate(&key("a"), None), Ok(ip("127.0.0.10")));
        assert_eq!(p.allocate(&key("c"), None), Ok(ip("127.0.0.12")));
        assert_eq!(p.allocate(&key("d"), None), Ok(ip("127.0.1.1")));
        assert!(matches!(
            p.allocate(&key("e"), None),
            Err(PoolError::Exhausted { .. })
        ));
        assert_eq!(p.release(&key("b")), Some(ip("127.0.0.11")));
        assert_eq!(p.allocate(&key("e"), None), Ok(ip("127.0.0.11")));
        assert_eq!(p.allocated(), 4);
    }

    #[test]
    fn requested_addresses() {
        let mut p = pool(&["127.0.0.10-127.0.0.19"]);
        let cases = [
            ("a", "127.0.0.15", Ok(ip("127.0.0.15"))),
            (
                "b",
                "127.0.0.15",
                Err(PoolError::InUse {
                    ip: ip("127.0.0.15"),
                    owner: "default/a".into(),
                }),
            ),
            (
                "b",
                "10.1.1.1",
                Err(PoolError::OutsidePool {
                    ip: ip("10.1.1.1"),
                    pool: "127.0.0.10-127.0.0.19".into(),
                }),
            ),
            // Same Service asking again is fine; moving frees the old address.
            ("a", "127.0.0.15", Ok(ip("127.0.0.15"))),
            ("a", "127.0.0.16", Ok(ip("127.0.0.16"))),
            ("b", "127.0.0.15", Ok(ip("127.0.0.15"))),
        ];
        for (svc, requested, want) in cases {
            assert_eq!(
                p.allocate(&key(svc), Some(ip(requested))),
                want,
                "{svc} asks {requested}"
            );
        }
        assert_eq!(p.allocated(), 2);
    }

    #[test]
    fn refused_request_keeps_the_old_address() {
        let mut p = pool(&["127.0.0.10-127.0.0.19"]);
        p.allocate(&key("a"), None).unwrap();
        assert!(p.allocate(&key("a"), Some(ip("10.0.0.1"))).is_err());
        assert_eq!(p.get(&key("a")), Some(ip("127.0.0.10")));
    }

    #[test]
    fn adoption_prevents_double_allocation() {
        let mut p = pool(&["127.0.0.10-127.0.0.19"]);
        p.adopt(&key("old"), ip("127.0.0.10")).unwrap();
        assert_eq!(p.allocate(&key("new"), None), Ok(ip("127.0.0.11")));
        assert!(matches!(
            p.adopt(&key("other"), ip("127.0.0.10")),
            Err(PoolError::InUse { .. })
        ));
        assert!(matches!(
            p.adopt(&key("other"), ip("10.0.0.1")),
            Err(PoolError::OutsidePool { .. })
        ));
        assert_eq!(p.get(&key("other")), None);
        // Adopting twice is idempotent.
        p.adopt(&key("old"), ip("127.0.0.10")).unwrap();
        assert_eq!(p.allocated(), 2);
    }

    #[test]
    fn would_allocate_predicts_allocate_without_allocating() {
        let mut p = pool(&["127.0.0.10-127.0.0.12"]);
        p.allocate(&key("a"), None).unwrap();
        // (service, requested) in order; each prediction is checked against the real call.
        let cases = [
            ("a", None),
            ("b", None),
            ("a", Some("127.0.0.12")),
            ("c", Some("127.0.0.10")),
            ("c", Some("10.0.0.1")),
            ("d", None),
            ("e", None),
        ];
        for (svc, requested) in cases {
            let requested = requested.map(ip);
            let before = p.allocations();
            let predicted = p.would_allocate(&key(svc), requested);
            assert_eq!(
                p.allocations(),
                before,
                "{svc}: a prediction allocates nothing"
            );
            assert_eq!(
                p.allocate(&key(svc), requested),
                predicted,
                "{svc} {requested:?}"
            );
        }
    }

    #[test]
    fn allocations_record_when_this_process_allocated() {
        let mut p = pool(&["127.0.0.10-127.0.0.19"]);
        p.allocate(&key("new"), None).unwrap();
        p.adopt(&key("old"), ip("127.0.0.15")).unwrap();
        let listed: Vec<(String, IpAddr, bool)> = p
            .allocations()
            .into_iter()
            .map(|a| (a.service.name, a.ip, a.allocated_at.is_some()))
            .collect();
        assert_eq!(
            listed,
            vec![
                ("new".to_string(), ip("127.0.0.10"), true),
                ("old".to_string(), ip("127.0.0.15"), false),
            ]
        );
        p.release(&key("new"));
        assert_eq!(p.allocations().len(), 1);
    }

    #[test]
    fn ipv6_ranges() {
        let mut p = pool(&["fd00::/126"]);
        assert_eq!(p.allocate(&key("a"), None), Ok(ip("fd00::")));
        assert!(!p.contains(ip("127.0.0.1")));
    }
}
