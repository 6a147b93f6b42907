//! Endpoint choice for the userspace backend: the IPVS schedulers the seeds list, plus ClientIP
//! session affinity. Pure state, no I/O; time is passed in.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use tokio::time::Instant;

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
}

impl Scheduler {
    /// Every scheduler, for round-trip tests and help texts.
    pub const ALL: [Scheduler; 7] = [
        Scheduler::RoundRobin,
        Scheduler::LeastConnection,
        Scheduler::DestinationHash,
        Scheduler::SourceHash,
        Scheduler::ShortestExpectedDelay,
        Scheduler::NeverQueue,
        Scheduler::Random,
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
                    "unknown scheduler {value:?}; expected one of rr, lc, dh, sh, sed, nq, random"
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
}

impl Pool {
    /// A pool for `frontend` with the given endpoints.
    pub fn new(
        scheduler: Scheduler,
        frontend: SocketAddr,
        endpoints: Vec<EndpointAddr>,
        affinity_timeout: Option<Duration>,
    ) -> Self {
        Pool {
            scheduler,
            frontend,
            endpoints,
            active: HashMap::new(),
            cursor: 0,
            affinity_timeout,
            affinity: HashMap::new(),
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
            self.endpoints = endpoints;
            self.cursor = 0;
        }
    }

    /// Chooses an endpoint for a new connection from `client`, skipping `failed` ones. The
    /// affinity entry is honoured only on the first attempt (`failed` empty), as the legacy
    /// userspace proxy did; the final choice is remembered.
    pub fn pick(
        &mut self,
        client: IpAddr,
        failed: &[EndpointAddr],
        now: Instant,
    ) -> Option<EndpointAddr> {
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

    /// Forgets expired affinity entries.
    pub fn reap(&mut self, now: Instant) {
        if let Some(timeout) = self.affinity_timeout {
            self.affinity
                .retain(|_, (_, last)| now.saturating_duration_since(*last) < timeout);
        }
    }
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

    fn client(i: u8) -> IpAddr {
        IpAddr::from([192, 168, 0, i])
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
        let pick_n = |scheduler, n: usize, active: &[usize], clients: &dyn Fn(usize) -> IpAddr| {
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
