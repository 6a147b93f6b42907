//! Maglev consistent hashing (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
//! Balancer", NSDI 2016, §3.4): a lookup table of prime size `M` whose entries name endpoints,
//! filled so that every endpoint owns ⌊M/N⌋ or ⌈M/N⌉ entries and a change of one endpoint moves
//! few entries besides that endpoint's own.
//!
//! Everything here is a pure function of the endpoint *set* (IP and port, never list order) and
//! the table size, so every node fills the same table and picks the same endpoint for a flow, in
//! both backends:
//! - the nftables backend hashes a flow with the kernel's `jhash ip saddr . th sport mod M`;
//! - the userspace backend computes the same value with [`flow_bucket`], a bit-exact copy of the
//!   kernel's `jhash` and of its `mod` (a multiply-shift, not a remainder).
//!
//! A flow is identified by its client address and port only: the destination differs per node
//! for NodePort traffic (each node's own address), and a load balancer spreading one client's
//! connections over nodes must still see them land on one endpoint per connection.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use crate::model::EndpointAddr;

/// Lookup table size used unless configured: a prime sized for Services of up to ~10 endpoints,
/// the common case. Two costs pull in opposite directions:
/// - disruption: Maglev moves a few entries between surviving endpoints when one comes or goes,
///   on top of the departed endpoint's own 1/N; this extra stays under 2 % of the table while
///   M ≥ ~100·N (this module's tests measure it: 4093 at 2–10 endpoints, 16381 up to 160) and
///   reaches 6 % at M ≈ 10·N;
/// - update cost: replacing one endpoint rewrites ~2·M/N entries, and in nftables each is a map
///   element deleted and added (3–10 µs of libnftables CPU each), so at 10 endpoints one change
///   costs ~22 ms where the default scheduler's costs under 1 ms (`bench/dataplane.rs`,
///   2026-11-25, in the backend's kept libnftables context), and 16381 would cost about four
///   times as many element updates.
///
/// Clusters with larger Services raise `--maglev-table-size` (16381, Cilium's default, for ~100
/// endpoints) and pay the update cost. Memory: M entries per endpoint group, 8 KiB per frontend
/// in userspace, M map elements per group of 2+ endpoints in nftables.
pub const DEFAULT_TABLE_SIZE: u32 = 4093;

/// Largest table size accepted: the paper's production size.
pub const MAX_TABLE_SIZE: u32 = 65_537;

/// Most endpoints one table distributes over; more are ignored (entries index them as `u16`).
pub const MAX_ENDPOINTS: usize = u16::MAX as usize;

/// Seed of the flow hash, shared by the nftables rule and [`flow_bucket`]. Any constant works as
/// long as every node uses the same one.
pub const FLOW_SEED: u32 = 0x6d61_676c;

/// A validated Maglev table size: a prime between 3 and [`MAX_TABLE_SIZE`]. Primality makes every
/// `skip` in 1..M coprime with M, so each endpoint's preference list visits every entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableSize(u32);

/// Why a table size was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableSizeError {
    /// Not a number.
    #[error("maglev table size {0:?} is not a number")]
    NotANumber(String),
    /// Not a prime, or outside 3..=65537.
    #[error(
        "maglev table size {size} must be a prime between 3 and {MAX_TABLE_SIZE} (e.g. 251, 1021, 4093, 16381, 65521)"
    )]
    Invalid {
        /// The size given.
        size: u64,
    },
}

impl TableSize {
    /// [`DEFAULT_TABLE_SIZE`].
    pub const DEFAULT: TableSize = TableSize(DEFAULT_TABLE_SIZE);

    /// `size` if it is a prime in range.
    pub fn new(size: u64) -> Result<Self, TableSizeError> {
        match u32::try_from(size) {
            Ok(small) if (3..=MAX_TABLE_SIZE).contains(&small) && is_prime(small) => {
                Ok(TableSize(small))
            }
            _ => Err(TableSizeError::Invalid { size }),
        }
    }

    /// The number of entries.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl Default for TableSize {
    fn default() -> Self {
        TableSize::DEFAULT
    }
}

impl fmt::Display for TableSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for TableSize {
    type Err = TableSizeError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let size = value
            .trim()
            .parse::<u64>()
            .map_err(|_| TableSizeError::NotANumber(value.to_owned()))?;
        TableSize::new(size)
    }
}

fn is_prime(n: u32) -> bool {
    n >= 2
        && (2..)
            .take_while(|d| d * d <= n)
            .all(|d| !n.is_multiple_of(d))
}

/// A filled lookup table: entry `i` names `endpoints()[entries[i]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    endpoints: Vec<EndpointAddr>,
    entries: Vec<u16>,
}

impl Table {
    /// Fills a table of `size` entries for `endpoints`. Duplicates are ignored and the order of
    /// `endpoints` does not matter. With more than [`MAX_ENDPOINTS`], the lowest addresses are
    /// used. An empty input gives an empty table.
    pub fn new(endpoints: &[EndpointAddr], size: TableSize) -> Self {
        let mut sorted = endpoints.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        sorted.truncate(MAX_ENDPOINTS);
        let entries = if sorted.is_empty() {
            Vec::new()
        } else {
            populate(&sorted, size.get())
        };
        Table {
            endpoints: sorted,
            entries,
        }
    }

    /// The endpoints, sorted (the order entries index into).
    pub fn endpoints(&self) -> &[EndpointAddr] {
        &self.endpoints
    }

    /// Number of entries (the table size, or 0 without endpoints).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True without endpoints.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The endpoint of entry `bucket` (`None` past the end).
    pub fn get(&self, bucket: usize) -> Option<EndpointAddr> {
        self.entries
            .get(bucket)
            .map(|index| self.endpoints[usize::from(*index)])
    }

    /// Every entry's endpoint, in entry order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = EndpointAddr> + '_ {
        self.entries
            .iter()
            .map(|index| self.endpoints[usize::from(*index)])
    }

    /// The endpoint for a flow from `client`.
    pub fn lookup(&self, client: SocketAddr) -> Option<EndpointAddr> {
        let size = u32::try_from(self.entries.len()).ok()?;
        self.get(flow_bucket(client, size) as usize)
    }

    /// Entries whose endpoint differs between `self` and `other` (tables of one size).
    pub fn moved(&self, other: &Table) -> usize {
        self.iter()
            .zip(other.iter())
            .filter(|(a, b)| a != b)
            .count()
            + self.len().abs_diff(other.len())
    }
}

/// Maglev's population (the paper's Pseudocode 1): endpoints take turns, in address order, each
/// claiming the next free entry of its own permutation `(offset + j·skip) mod M`.
fn populate(endpoints: &[EndpointAddr], size: u32) -> Vec<u16> {
    let m = u64::from(size);
    let permutations: Vec<(u64, u64)> = endpoints
        .iter()
        .map(|endpoint| {
            let offset = identity_hash(endpoint, 0) % m;
            let skip = identity_hash(endpoint, SKIP_SEED) % (m - 1) + 1;
            (offset, skip)
        })
        .collect();
    let mut next = vec![0u64; endpoints.len()];
    let mut entries = vec![u16::MAX; size as usize];
    let mut filled = 0usize;
    loop {
        for (index, (offset, skip)) in permutations.iter().enumerate() {
            // Terminates: skip is coprime with the prime M, so the permutation reaches every
            // entry within M steps, and the table still has a free one.
            let mut candidate;
            loop {
                candidate = ((offset + next[index] * skip) % m) as usize;
                next[index] += 1;
                if entries[candidate] == u16::MAX {
                    break;
                }
            }
            entries[candidate] = u16::try_from(index).unwrap_or(u16::MAX - 1);
            filled += 1;
            if filled == entries.len() {
                return entries;
            }
        }
    }
}

const SKIP_SEED: u64 = 0x5bd1_e995;

/// A 64-bit hash of an endpoint's identity (address bytes and port), defined here rather than
/// taken from `std` so it cannot change between builds: FNV-1a over the bytes, then the
/// SplitMix64 finaliser to spread FNV's weak low bits.
fn identity_hash(endpoint: &EndpointAddr, seed: u64) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325 ^ seed;
    let mut feed = |bytes: &[u8]| {
        for byte in bytes {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    match endpoint.ip {
        IpAddr::V4(ip) => feed(&ip.octets()),
        IpAddr::V6(ip) => feed(&ip.octets()),
    }
    feed(&endpoint.port.to_be_bytes());
    let mut z = hash.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The table entry nftables' `jhash ip saddr . th sport mod size seed FLOW_SEED` picks for a flow
/// from `client`: the registers hold the address bytes, then the port in network order padded
/// with zeros to four bytes, and `mod` scales the hash (`(hash · size) >> 32`).
pub fn flow_bucket(client: SocketAddr, size: u32) -> u32 {
    let mut key = [0u8; 20];
    let len = match client.ip() {
        IpAddr::V4(ip) => {
            key[..4].copy_from_slice(&ip.octets());
            key[4..6].copy_from_slice(&client.port().to_be_bytes());
            8
        }
        IpAddr::V6(ip) => {
            key[..16].copy_from_slice(&ip.octets());
            key[16..18].copy_from_slice(&client.port().to_be_bytes());
            20
        }
    };
    let hash = jhash(&key[..len], FLOW_SEED);
    ((u64::from(hash) * u64::from(size)) >> 32) as u32
}

/// The Linux kernel's `jhash()` (Bob Jenkins' lookup3, `include/linux/jhash.h`) as a
/// little-endian machine computes it: words are read little-endian.
pub fn jhash(key: &[u8], initval: u32) -> u32 {
    let len = u32::try_from(key.len()).unwrap_or(u32::MAX);
    let start = 0xdead_beef_u32.wrapping_add(len).wrapping_add(initval);
    let (mut a, mut b, mut c) = (start, start, start);
    let word = |bytes: &[u8]| {
        bytes
            .iter()
            .enumerate()
            .fold(0u32, |word, (i, byte)| word | (u32::from(*byte) << (8 * i)))
    };
    let mut rest = key;
    while rest.len() > 12 {
        a = a.wrapping_add(word(&rest[0..4]));
        b = b.wrapping_add(word(&rest[4..8]));
        c = c.wrapping_add(word(&rest[8..12]));
        mix(&mut a, &mut b, &mut c);
        rest = &rest[12..];
    }
    if rest.is_empty() {
        return c;
    }
    // The tail adds its bytes the same way, missing ones as zero.
    a = a.wrapping_add(word(&rest[..rest.len().min(4)]));
    if rest.len() > 4 {
        b = b.wrapping_add(word(&rest[4..rest.len().min(8)]));
    }
    if rest.len() > 8 {
        c = c.wrapping_add(word(&rest[8..]));
    }
    final_mix(&mut a, &mut b, &mut c);
    c
}

fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c) ^ c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a) ^ a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b) ^ b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c) ^ c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a) ^ a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b) ^ b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

fn final_mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

#[cfg(test)]
mod tests;
