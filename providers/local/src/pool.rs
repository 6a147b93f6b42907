//! Address ranges: the `--local-pool` flag's ranges ([`Pool`]) and the entries of an `IPPool`
//! are both lists of [`IpRange`]s.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::IpNet;

/// The default pool: inside 127.0.0.0/8 so it works on any Linux machine without configuration,
/// and away from 127.0.0.1 and the low 127.0.x.y addresses other tools use.
pub const DEFAULT_POOL: &str = "127.240.0.0/16";

/// An inclusive range of addresses of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpRange {
    start: IpAddr,
    end: IpAddr,
}

/// Why the `--local-pool` ranges were refused.
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
}

pub(crate) fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

pub(crate) fn same_family(template: IpAddr, value: u128) -> IpAddr {
    match template {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(u32::try_from(value).unwrap_or(u32::MAX))),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

/// True for IPv4 addresses ending in `.0` or `.255`, which some old clients and routers
/// mishandle (MetalLB's `avoidBuggyIPs`).
pub fn is_buggy(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V4(v4) if matches!(v4.octets()[3], 0 | 255))
}

impl IpRange {
    /// An inclusive range; `None` when the families differ or `start > end`.
    pub fn new(start: IpAddr, end: IpAddr) -> Option<Self> {
        (start.is_ipv4() == end.is_ipv4() && to_u128(start) <= to_u128(end))
            .then_some(Self { start, end })
    }

    /// The usable addresses of a CIDR: without the network and broadcast addresses when the
    /// IPv4 prefix leaves room for them, as most tooling expects (the `--local-pool` reading).
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

    /// Every address of a CIDR, network and broadcast included (the `IPPool` reading, as
    /// MetalLB's; `avoidBuggyIPs` leaves out `.0` and `.255`).
    pub fn whole_cidr(net: IpNet) -> Self {
        Self {
            start: net.network(),
            end: net.broadcast(),
        }
    }

    /// The first address.
    pub fn start(&self) -> IpAddr {
        self.start
    }

    /// The last address.
    pub fn end(&self) -> IpAddr {
        self.end
    }

    /// True for an IPv4 range.
    pub fn is_ipv4(&self) -> bool {
        self.start.is_ipv4()
    }

    /// Number of addresses.
    pub fn len(&self) -> u128 {
        (to_u128(self.end) - to_u128(self.start)).saturating_add(1)
    }

    /// Always false: a range holds at least one address.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Number of addresses ending in `.0` or `.255` (IPv4; zero for IPv6).
    pub fn buggy_count(&self) -> u128 {
        if !self.is_ipv4() {
            return 0;
        }
        // Addresses v <= x with v % 256 == 0, plus those with v % 256 == 255.
        let upto = |x: u128| x / 256 + 1 + (x + 1) / 256;
        let (s, e) = (to_u128(self.start), to_u128(self.end));
        upto(e) - if s == 0 { 0 } else { upto(s - 1) }
    }

    /// True when `ip` is inside the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.start.is_ipv4()
            && (to_u128(self.start)..=to_u128(self.end)).contains(&to_u128(ip))
    }

    /// True when the two ranges share an address.
    pub fn overlaps(&self, other: &IpRange) -> bool {
        self.is_ipv4() == other.is_ipv4()
            && to_u128(self.start) <= to_u128(other.end)
            && to_u128(other.start) <= to_u128(self.end)
    }

    /// The address after `ip` inside the range, if any.
    pub(crate) fn next_after(&self, ip: IpAddr) -> Option<IpAddr> {
        let next = to_u128(ip).checked_add(1)?;
        (next <= to_u128(self.end)).then(|| same_family(self.start, next))
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

/// The ranges of the `--local-pool` flag: the pool used while no `IPPool` is defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    ranges: Vec<IpRange>,
}

impl Pool {
    /// A pool over `ranges`.
    pub fn new(ranges: Vec<IpRange>) -> Result<Self, PoolError> {
        if ranges.is_empty() {
            return Err(PoolError::Empty);
        }
        Ok(Self { ranges })
    }

    /// The pool over [`DEFAULT_POOL`].
    pub fn default_loopback() -> Self {
        Self {
            // DEFAULT_POOL without its network and broadcast addresses.
            ranges: vec![IpRange {
                start: IpAddr::V4(Ipv4Addr::new(127, 240, 0, 1)),
                end: IpAddr::V4(Ipv4Addr::new(127, 240, 255, 254)),
            }],
        }
    }

    /// The ranges.
    pub fn ranges(&self) -> &[IpRange] {
        &self.ranges
    }

    /// True when `ip` is inside one of the ranges.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.contains(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
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
        let p = Pool::default_loopback();
        assert_eq!(p.ranges(), &[DEFAULT_POOL.parse().unwrap()]);
        assert!(!p.contains(ip("127.0.0.1")));
        assert!(p.contains(ip("127.240.0.1")));
    }

    #[test]
    fn counts_overlaps_and_buggy_addresses() {
        let r = |s: &str| -> IpRange {
            let (a, b) = s.split_once('-').unwrap();
            IpRange::new(ip(a), ip(b)).unwrap()
        };
        // (range, len, addresses ending in .0 or .255)
        let cases = [
            ("10.0.0.0-10.0.0.255", 256, 2),
            ("10.0.0.1-10.0.0.254", 254, 0),
            ("10.0.0.250-10.0.1.5", 12, 2),
            ("0.0.0.0-0.0.0.0", 1, 1),
            ("fd00::-fd00::ff", 256, 0),
        ];
        for (range, len, buggy) in cases {
            assert_eq!(r(range).len(), len, "{range}");
            assert_eq!(r(range).buggy_count(), buggy, "{range}");
        }
        assert!(r("10.0.0.0-10.0.0.10").overlaps(&r("10.0.0.10-10.0.0.20")));
        assert!(!r("10.0.0.0-10.0.0.9").overlaps(&r("10.0.0.10-10.0.0.20")));
        assert!(!r("10.0.0.0-10.0.0.9").overlaps(&r("fd00::-fd00::ff")));
        let whole = IpRange::whole_cidr("10.0.0.0/24".parse().unwrap());
        assert_eq!(
            (whole.start(), whole.end()),
            (ip("10.0.0.0"), ip("10.0.0.255"))
        );
        assert!(is_buggy(ip("10.0.0.255")) && !is_buggy(ip("10.0.0.1")) && !is_buggy(ip("fd00::")));
    }
}
