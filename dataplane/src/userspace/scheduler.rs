//! Endpoint choice for the userspace backend: the IPVS schedulers the seeds list, Maglev
//! consistent hashing, plus ClientIP session affinity. Pure state, no I/O; time is passed in.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use tokio::time::Instant;

use crate::maglev::{self, TableSize};
use crate::model::EndpointAddr;

/// The seeds' IPVS schedulers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scheduler {
    /// `rr`: cycle through endpoints in order.
    #[default]
    RoundRobin,
    /// `lc`: fewest active connections.
    LeastConnection,
    /// `dh`: static hash of the destination (the frontend address).
    DestinationHash,
    /// `sh`: static hash of the client source address.
    SourceHash,
    /// `sed`: shortest expected delay, minimum (active + 1) / weight (all weights are 1).
    ShortestExpectedDelay,
    /// `nq`: an idle endpoint if there is one, otherwise like `sed`.
    NeverQueue,
    /// `random`: uniform random choice.
    Random,
    /// `maglev`: Maglev consistent hashing of the client address and port, with a table of the
    /// given size; every node (in either mode) picks the same endpoint for a flow.
    Maglev(TableSize),
}

impl Scheduler {
    /// Every scheduler, for round-trip tests and help texts.
    pub const ALL: [Scheduler; 8] = [
        Scheduler::RoundRobin,
        Scheduler::LeastConnection,
        Scheduler::DestinationHash,
        Scheduler::SourceHash,
        Scheduler::ShortestExpectedDelay,
        Scheduler::NeverQueue,
        Scheduler::Random,
        Scheduler::Maglev(TableSize::DEFAULT),
    ];
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scheduler::RoundRobin => "rr",
            Scheduler::LeastConnection => "lc",
            Scheduler::DestinationHash => "dh",
            Scheduler::SourceHash => "sh",
            Scheduler::ShortestExpectedDelay => "sed",
            Scheduler::NeverQueue => "nq",
            Scheduler::Random => "random",
            Scheduler::Maglev(_) => "maglev",
        })
    }
}

impl FromStr for Scheduler {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Scheduler::ALL
            .into_iter()
            .find(|scheduler| scheduler.to_string() == value)
            .ok_or_else(|| {
                format!(
                    "unknown scheduler {value:?}; expected one of rr, lc, dh, sh, sed, nq, random, maglev"
                )
            })
    }
}

fn stable_hash(value: impl Hash) -> u64 {
    // DefaultHasher::new() uses fixed keys: the same input maps to the same endpoint for the
    // lifetime of the binary, which is what "static hash" means here.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// Endpoints of one frontend with their scheduling state.
#[derive(Debug)]
pub struct Pool {
    scheduler: Scheduler,
    frontend: SocketAddr,
    endpoints: Vec<EndpointAddr>,
    active: HashMap<EndpointAddr, usize>,
    cursor: usize,
    affinity_timeout: Option<Duration>,
    affinity: HashMap<IpAddr, (EndpointAddr, Instant)>,
    /// The lookup table when the scheduler is Maglev.
    maglev: Option<maglev::Table>,
}

/// Affinity tables this much larger than their content give memory back when reaped: a burst of
/// clients must not leave its peak allocation behind.
const SHRINK_FACTOR: usize = 4;

/// Capacity kept however empty the table gets, so a quiet Service does not reallocate.
const MIN_AFFINITY_CAPACITY: usize = 64;

/// Longest wait between two affinity sweeps; a table without affinity is looked at this often in
/// case affinity is switched on.
const MAX_REAP_INTERVAL: Duration = Duration::from_secs(10);

/// Shortest wait between two affinity sweeps.
const MIN_REAP_INTERVAL: Duration = Duration::from_millis(100);

impl Pool {
    /// A pool for `frontend` with the given endpoints.
    pub fn new(
        scheduler: Scheduler,
        frontend: SocketAddr,
        endpoints: Vec<EndpointAddr>,
        affinity_timeout: Option<Duration>,
    ) -> Self {
        let maglev = maglev_table(scheduler, &endpoints);
        Pool {
            scheduler,
            frontend,
            endpoints,
            active: HashMap::new(),
            cursor: 0,
            affinity_timeout,
            affinity: HashMap::new(),
            maglev,
        }
    }

    /// The current endpoints.
    pub fn endpoints(&self) -> &[EndpointAddr] {
        &self.endpoints
    }

    /// Replaces the endpoints; affinity entries of removed endpoints are dropped and the round
    /// robin cursor restarts.
    pub fn update(&mut self, endpoints: Vec<EndpointAddr>, affinity_timeout: Option<Duration>) {
        if affinity_timeout != self.affinity_timeout {
            self.affinity.clear();
            self.affinity_timeout = affinity_timeout;
        }
        if endpoints != self.endpoints {
            self.affinity
                .retain(|_, (endpoint, _)| endpoints.contains(endpoint));
            self.maglev = maglev_table(self.scheduler, &endpoints);
            self.endpoints = endpoints;
            self.cursor = 0;
        }
    }

    /// Chooses an endpoint for a new connection from `peer`, skipping `failed` ones. The
    /// affinity entry (keyed by the client's address) is honoured only on the first attempt
    /// (`failed` empty), as the legacy userspace proxy did; the final choice is remembered.
    pub fn pick(
        &mut self,
        peer: SocketAddr,
        failed: &[EndpointAddr],
        now: Instant,
    ) -> Option<EndpointAddr> {
        let client = peer.ip();
        if let (Some(timeout), true) = (self.affinity_timeout, failed.is_empty())
            && let Some((endpoint, last)) = self.affinity.get_mut(&client)
            && now.saturating_duration_since(*last) < timeout
            && self.endpoints.contains(endpoint)
        {
            *last = now;
            return Some(*endpoint);
        }
        // Only a retry filters: the first attempt of every connection allocates nothing.
        let candidates: Cow<'_, [EndpointAddr]> = if failed.is_empty() {
            Cow::Borrowed(&self.endpoints)
        } else {
            Cow::Owned(
                self.endpoints
                    .iter()
                    .copied()
                    .filter(|e| !failed.contains(e))
                    .collect(),
            )
        };
        if candidates.is_empty() {
            return None;
        }
        let active = |endpoint: &EndpointAddr| self.active.get(endpoint).copied().unwrap_or(0);
        let chosen = match self.scheduler {
            Scheduler::RoundRobin => {
                let chosen = candidates[self.cursor % candidates.len()];
                self.cursor = self.cursor.wrapping_add(1);
                chosen
            }
            Scheduler::LeastConnection | Scheduler::ShortestExpectedDelay => {
                // With equal weights, (C + 1) / W orders exactly like C; ties go to the first.
                *candidates
                    .iter()
                    .min_by_key(|e| active(e))
                    .unwrap_or(&candidates[0])
            }
            Scheduler::NeverQueue => match candidates.iter().find(|e| active(e) == 0) {
                Some(idle) => *idle,
                None => *candidates
                    .iter()
                    .min_by_key(|e| active(e))
                    .unwrap_or(&candidates[0]),
            },
            Scheduler::DestinationHash => {
                candidates[(stable_hash(self.frontend.ip()) % candidates.len() as u64) as usize]
            }
            Scheduler::SourceHash => {
                candidates[(stable_hash(client) % candidates.len() as u64) as usize]
            }
            Scheduler::Random => candidates[rand::random_range(0..candidates.len())],
            Scheduler::Maglev(_) => match &self.maglev {
                Some(table) => maglev_pick(table, peer, failed)?,
                None => candidates[0],
            },
        };
        if self.affinity_timeout.is_some() {
            self.affinity.insert(client, (chosen, now));
        }
        Some(chosen)
    }

    /// Counts a connection to `endpoint` as active.
    pub fn connected(&mut self, endpoint: EndpointAddr) {
        *self.active.entry(endpoint).or_default() += 1;
    }

    /// Counts a connection to `endpoint` as finished.
    pub fn disconnected(&mut self, endpoint: EndpointAddr) {
        if let Some(count) = self.active.get_mut(&endpoint) {
            *count = count.saturating_sub(1);
        }
    }

    /// Forgets expired affinity entries and returns how many went. A table left much larger
    /// than its content is shrunk, so the memory of a burst of clients is given back.
    pub fn reap(&mut self, now: Instant) -> usize {
        let before = self.affinity.len();
        match self.affinity_timeout {
            Some(timeout) => self
                .affinity
                .retain(|_, (_, last)| now.saturating_duration_since(*last) < timeout),
            None => self.affinity.clear(),
        }
        if self.affinity.capacity() > MIN_AFFINITY_CAPACITY
            && self.affinity.capacity() > SHRINK_FACTOR * self.affinity.len()
        {
            self.affinity
                .shrink_to(MIN_AFFINITY_CAPACITY.max(2 * self.affinity.len()));
        }
        before - self.affinity.len()
    }

    /// How long to wait before the next [`Pool::reap`]: a quarter of the affinity timeout, so an
    /// entry is gone at most 1.25 timeouts after its last use.
    pub fn reap_interval(&self) -> Duration {
        self.affinity_timeout
            .map_or(MAX_REAP_INTERVAL, |timeout| timeout / 4)
            .clamp(MIN_REAP_INTERVAL, MAX_REAP_INTERVAL)
    }

    /// Clients currently remembered for ClientIP affinity.
    pub fn affinity_len(&self) -> usize {
        self.affinity.len()
    }

    /// Room the affinity table holds without growing (what its memory is sized for).
    pub fn affinity_capacity(&self) -> usize {
        self.affinity.capacity()
    }
}

fn maglev_table(scheduler: Scheduler, endpoints: &[EndpointAddr]) -> Option<maglev::Table> {
    match scheduler {
        Scheduler::Maglev(size) => Some(maglev::Table::new(endpoints, size)),
        _ => None,
    }
}

/// The flow's entry, or on a retry the next entries in table order until one is not `failed`:
/// deterministic, so every node retries a flow the same way.
fn maglev_pick(
    table: &maglev::Table,
    peer: SocketAddr,
    failed: &[EndpointAddr],
) -> Option<EndpointAddr> {
    let size = table.len();
    let start = maglev::flow_bucket(peer, u32::try_from(size).ok()?) as usize;
    (0..size)
        .filter_map(|step| table.get((start + step) % size))
        .find(|endpoint| !failed.contains(endpoint))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eps(count: u8) -> Vec<EndpointAddr> {
        (1..=count)
            .map(|i| EndpointAddr {
                ip: IpAddr::from([10, 0, 0, i]),
                port: 80,
            })
            .collect()
    }

    fn client(i: u8) -> SocketAddr {
        SocketAddr::new(IpAddr::from([192, 168, 0, i]), 40_000)
    }

    const FRONTEND: SocketAddr =
        SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1)), 80);

    #[test]
    fn names_round_trip() {
        for scheduler in Scheduler::ALL {
            assert_eq!(scheduler.to_string().parse::<Scheduler>(), Ok(scheduler));
        }
        assert!("wlc".parse::<Scheduler>().is_err());
    }

    #[test]
    fn choices_per_scheduler() {
        let now = Instant::now();
        let endpoints = eps(3);
        let pick_n =
            |scheduler, n: usize, active: &[usize], clients: &dyn Fn(usize) -> SocketAddr| {
                let mut pool = Pool::new(scheduler, FRONTEND, endpoints.clone(), None);
                for (endpoint, count) in endpoints.iter().zip(active) {
                    for _ in 0..*count {
                        pool.connected(*endpoint);
                    }
                }
                (0..n)
                    .map(|i| pool.pick(clients(i), &[], now).unwrap())
                    .collect::<Vec<_>>()
            };
        let same = |_| client(1);
        let varied = |i: usize| client(u8::try_from(i).unwrap());
        let e = &endpoints;
        assert_eq!(
            pick_n(Scheduler::RoundRobin, 4, &[], &same),
            vec![e[0], e[1], e[2], e[0]]
        );
        assert_eq!(
            pick_n(Scheduler::LeastConnection, 1, &[2, 0, 1], &same),
            vec![e[1]]
        );
        assert_eq!(
            pick_n(Scheduler::ShortestExpectedDelay, 1, &[2, 1, 3], &same),
            vec![e[1]]
        );
        assert_eq!(
            pick_n(Scheduler::NeverQueue, 1, &[1, 1, 0], &same),
            vec![e[2]]
        );
        assert_eq!(
            pick_n(Scheduler::NeverQueue, 1, &[2, 1, 3], &same),
            vec![e[1]]
        );
        // Hashes: stable per key.
        let by_source = pick_n(Scheduler::SourceHash, 20, &[], &varied);
        assert_eq!(by_source, pick_n(Scheduler::SourceHash, 20, &[], &varied));
        assert!(
            by_source
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                > 1,
            "different clients spread"
        );
        let by_destination = pick_n(Scheduler::DestinationHash, 10, &[], &varied);
        assert!(
            by_destination.iter().all(|e| *e == by_destination[0]),
            "one frontend, one endpoint"
        );
        let random = pick_n(Scheduler::Random, 200, &[], &same);
        assert_eq!(
            random
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            3
        );
    }

    #[test]
    fn failed_endpoints_are_skipped_and_affinity_bypassed() {
        let now = Instant::now();
        let endpoints = eps(2);
        let mut pool = Pool::new(
            Scheduler::RoundRobin,
            FRONTEND,
            endpoints.clone(),
            Some(Duration::from_secs(10)),
        );
        assert_eq!(pool.pick(client(1), &[], now), Some(endpoints[0]));
        assert_eq!(
            pool.pick(client(1), &[endpoints[0]], now),
            Some(endpoints[1]),
            "retry avoids the failed one"
        );
        assert_eq!(
            pool.pick(client(1), &[], now),
            Some(endpoints[1]),
            "the retry's choice is remembered"
        );
        assert_eq!(pool.pick(client(1), &endpoints, now), None);
    }

    #[test]
    fn affinity_sticks_until_the_timeout_after_last_use() {
        let start = Instant::now();
        let endpoints = eps(3);
        let mut pool = Pool::new(
            Scheduler::RoundRobin,
            FRONTEND,
            endpoints.clone(),
            Some(Duration::from_secs(10)),
        );
        let first = pool.pick(client(1), &[], start).unwrap();
        for second in 1..20u64 {
            assert_eq!(
                pool.pick(client(1), &[], start + Duration::from_secs(second)),
                Some(first)
            );
        }
        // 10 s after the last use the entry has expired: round robin moves on.
        let later = start + Duration::from_secs(19 + 10);
        assert_ne!(pool.pick(client(1), &[], later), Some(first));
        // Removing the remembered endpoint drops the entry.
        let chosen = pool.pick(client(2), &[], later).unwrap();
        pool.update(
            endpoints.iter().copied().filter(|e| *e != chosen).collect(),
            Some(Duration::from_secs(10)),
        );
        assert_ne!(pool.pick(client(2), &[], later), Some(chosen));
    }
}

#[cfg(test)]
mod state_tests {
    use super::*;

    fn eps(count: u8) -> Vec<EndpointAddr> {
        (1..=count)
            .map(|i| EndpointAddr {
                ip: IpAddr::from([10, 0, 0, i]),
                port: 80,
            })
            .collect()
    }

    fn peer(i: u32) -> SocketAddr {
        SocketAddr::from((
            [172, 16, (i >> 8) as u8, i as u8],
            30_000 + (i % 1000) as u16,
        ))
    }

    const FRONTEND: SocketAddr =
        SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1)), 80);

    #[test]
    fn maglev_follows_the_table_and_retries_in_table_order() {
        let now = Instant::now();
        let endpoints = eps(5);
        let size = TableSize::new(251).unwrap();
        let table = maglev::Table::new(&endpoints, size);
        let mut reversed = endpoints.clone();
        reversed.reverse();
        let mut pool = Pool::new(Scheduler::Maglev(size), FRONTEND, reversed, None);
        for i in 0..500 {
            let chosen = pool.pick(peer(i), &[], now);
            assert_eq!(chosen, table.lookup(peer(i)), "list order does not matter");
            // A retry avoids the failed endpoint and is itself deterministic.
            let failed = [chosen.unwrap()];
            let retry = pool.pick(peer(i), &failed, now).unwrap();
            assert_ne!(retry, failed[0]);
            assert_eq!(pool.pick(peer(i), &failed, now), Some(retry));
        }
        assert_eq!(pool.pick(peer(1), &endpoints, now), None);
        assert_eq!(
            "maglev".parse::<Scheduler>(),
            Ok(Scheduler::Maglev(TableSize::default()))
        );
    }

    #[test]
    fn expired_affinity_entries_are_reaped_and_their_memory_released() {
        let start = Instant::now();
        let timeout = Duration::from_secs(2);
        let mut pool = Pool::new(Scheduler::RoundRobin, FRONTEND, eps(3), Some(timeout));
        assert_eq!(pool.reap_interval(), Duration::from_millis(500));
        for i in 0..20_000 {
            pool.pick(peer(i), &[], start);
        }
        // A client seen again later stays; the burst goes.
        let late = start + Duration::from_secs(1);
        let regular = pool.pick(peer(7), &[], late);
        assert_eq!(pool.affinity_len(), 20_000);
        let peak = pool.affinity_capacity();
        assert_eq!(pool.reap(start + Duration::from_millis(1999)), 0);
        assert_eq!(pool.reap(start + timeout), 19_999);
        assert_eq!(pool.affinity_len(), 1);
        assert!(
            pool.affinity_capacity() <= MIN_AFFINITY_CAPACITY * 2,
            "{peak} -> {}",
            pool.affinity_capacity()
        );
        assert_eq!(
            pool.pick(peer(7), &[], late + Duration::from_secs(1)),
            regular
        );
        assert_eq!(pool.reap(late + timeout), 0, "refreshed by the last pick");
        assert_eq!(pool.reap(late + Duration::from_secs(1) + timeout), 1);
        // Without affinity the sweep only looks now and then.
        let idle = Pool::new(Scheduler::RoundRobin, FRONTEND, eps(1), None);
        assert_eq!(idle.reap_interval(), MAX_REAP_INTERVAL);
        let short = Pool::new(
            Scheduler::RoundRobin,
            FRONTEND,
            eps(1),
            Some(Duration::from_millis(10)),
        );
        assert_eq!(short.reap_interval(), MIN_REAP_INTERVAL);
    }
}
