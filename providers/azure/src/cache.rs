//! The objects every Service's sync reads and most share: the cluster's two load balancers,
//! its security group, the public IPs of a resource group and the subnets frontends use.
//! One copy serves every Service, so a resync after a restart reads each of them once per
//! pass (per TTL), not once per Service.
//!
//! This is safe for writes because every write carries the etag it was planned from: a
//! cached copy someone else changed since makes the write fail with 412, and the provider
//! then drops the cache ([`ArmCache::clear`]) and plans again from fresh reads. What this
//! provider writes replaces the cached copy ([`ArmCache::record`]). Drift that no write of ours
//! runs into is seen when the entry expires.
//!
//! Entries are shared (`Arc`), never copied on a hit: with every Service a frontend of the same
//! load balancer and a public IP of the same list, a deep copy per Service would make a pass
//! over N Services cost N² ([`crate::plan`] copies only the object it rewrites).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::arm::{LoadBalancer, PublicIp, SecurityGroup};

/// How long a cached read is trusted when nothing invalidated it.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
struct Timed<T> {
    value: T,
    at: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    /// `rg/name` (lowercase) → the load balancer, or `None` when it does not exist.
    load_balancers: BTreeMap<String, Timed<Option<Arc<LoadBalancer>>>>,
    /// `rg` (lowercase) → its public IPs.
    public_ips: BTreeMap<String, Timed<Vec<Arc<PublicIp>>>>,
    /// `rg/name` (lowercase) → the security group, or `None`.
    security_groups: BTreeMap<String, Timed<Option<Arc<SecurityGroup>>>>,
    /// `rg/vnet/subnet` (lowercase) of subnets known to exist.
    subnets: BTreeMap<String, Instant>,
}

/// What a successful write left in ARM, for [`ArmCache::record`].
#[derive(Debug)]
pub enum Written<'a> {
    /// A load balancer as stored (the PUT's answer), or `None` once deleted.
    LoadBalancer {
        /// Resource group.
        rg: &'a str,
        /// Name.
        name: &'a str,
        /// What is stored now.
        stored: Option<Arc<LoadBalancer>>,
    },
    /// A security group as stored.
    SecurityGroup {
        /// Resource group.
        rg: &'a str,
        /// What is stored now.
        stored: Arc<SecurityGroup>,
    },
    /// A public IP of `rg` was created, changed or deleted.
    PublicIps {
        /// Resource group.
        rg: &'a str,
    },
}

/// The provider-wide read cache. Never held across an `.await`.
#[derive(Debug)]
pub struct ArmCache {
    ttl: Duration,
    inner: Mutex<Inner>,
}

fn key(parts: &[&str]) -> String {
    parts.join("/").to_ascii_lowercase()
}

/// The entry when it is younger than `ttl`. `T` holds `Arc`s: the clone copies pointers.
fn fresh<T: Clone>(slot: Option<&Timed<T>>, now: Instant, ttl: Duration) -> Option<T> {
    slot.filter(|t| now.saturating_duration_since(t.at) < ttl)
        .map(|t| t.value.clone())
}

impl ArmCache {
    /// An empty cache whose entries live `ttl`.
    pub fn new(ttl: Duration) -> Self {
        ArmCache {
            ttl,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A cached load balancer (`Some(None)`: known not to exist).
    pub fn load_balancer(
        &self,
        rg: &str,
        name: &str,
        now: Instant,
    ) -> Option<Option<Arc<LoadBalancer>>> {
        fresh(
            self.inner().load_balancers.get(&key(&[rg, name])),
            now,
            self.ttl,
        )
    }

    /// Remembers a load balancer as read.
    pub fn put_load_balancer(
        &self,
        rg: &str,
        name: &str,
        value: Option<Arc<LoadBalancer>>,
        now: Instant,
    ) {
        self.inner()
            .load_balancers
            .insert(key(&[rg, name]), Timed { value, at: now });
    }

    /// The cached public IPs of `rg`.
    pub fn public_ips(&self, rg: &str, now: Instant) -> Option<Vec<Arc<PublicIp>>> {
        fresh(self.inner().public_ips.get(&key(&[rg])), now, self.ttl)
    }

    /// Remembers the public IPs of `rg` as listed.
    pub fn put_public_ips(&self, rg: &str, value: Vec<Arc<PublicIp>>, now: Instant) {
        self.inner()
            .public_ips
            .insert(key(&[rg]), Timed { value, at: now });
    }

    /// A cached security group (`Some(None)`: known not to exist).
    pub fn security_group(
        &self,
        rg: &str,
        name: &str,
        now: Instant,
    ) -> Option<Option<Arc<SecurityGroup>>> {
        fresh(
            self.inner().security_groups.get(&key(&[rg, name])),
            now,
            self.ttl,
        )
    }

    /// Remembers a security group as read.
    pub fn put_security_group(
        &self,
        rg: &str,
        name: &str,
        value: Option<Arc<SecurityGroup>>,
        now: Instant,
    ) {
        self.inner()
            .security_groups
            .insert(key(&[rg, name]), Timed { value, at: now });
    }

    /// Whether the subnet was seen to exist within the TTL (a missing one is not remembered:
    /// it may be on its way).
    pub fn subnet_exists(&self, rg: &str, vnet: &str, subnet: &str, now: Instant) -> bool {
        self.inner()
            .subnets
            .get(&key(&[rg, vnet, subnet]))
            .is_some_and(|at| now.saturating_duration_since(*at) < self.ttl)
    }

    /// Remembers that a subnet exists.
    pub fn put_subnet(&self, rg: &str, vnet: &str, subnet: &str, now: Instant) {
        self.inner().subnets.insert(key(&[rg, vnet, subnet]), now);
    }

    /// Takes in what a successful write stored.
    pub fn record(&self, written: Written<'_>, now: Instant) {
        match written {
            Written::LoadBalancer { rg, name, stored } => {
                self.put_load_balancer(rg, name, stored, now);
                // ARM sets or clears a public IP's `ipConfiguration` when a frontend takes or
                // leaves it: every listed public IP may have changed.
                self.inner().public_ips.clear();
            }
            Written::SecurityGroup { rg, stored } => {
                let name = stored.name.clone();
                self.put_security_group(rg, &name, Some(stored), now);
            }
            Written::PublicIps { rg } => {
                // The list is read again rather than patched: its order and the address ARM
                // allocated are the cloud's to say.
                self.inner().public_ips.remove(&key(&[rg]));
            }
        }
    }

    /// Forgets everything (after a failed or refused write, or a failed sync).
    pub fn clear(&self) {
        *self.inner() = Inner::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lb(name: &str, etag: &str) -> Arc<LoadBalancer> {
        Arc::new(LoadBalancer {
            name: name.into(),
            etag: Some(etag.into()),
            ..LoadBalancer::default()
        })
    }

    #[test]
    fn entries_expire_and_keys_ignore_case() {
        let cache = ArmCache::new(Duration::from_secs(60));
        let t0 = Instant::now();
        cache.put_load_balancer("RG", "kubernetes", Some(lb("kubernetes", "1")), t0);
        cache.put_load_balancer("rg", "kubernetes-internal", None, t0);
        // (rg, name, seconds later, expected)
        let cases = [
            ("rg", "kubernetes", 59, Some(Some(lb("kubernetes", "1")))),
            ("Rg", "KUBERNETES", 1, Some(Some(lb("kubernetes", "1")))),
            ("rg", "kubernetes-internal", 1, Some(None)),
            ("rg", "kubernetes", 60, None),
            ("other", "kubernetes", 1, None),
        ];
        for (rg, name, later, want) in cases {
            let got = cache.load_balancer(rg, name, t0 + Duration::from_secs(later));
            assert_eq!(got, want, "{rg}/{name} after {later}s");
        }
        cache.put_subnet("rg", "vnet", "apps", t0);
        assert!(cache.subnet_exists("RG", "vnet", "apps", t0));
        assert!(!cache.subnet_exists("rg", "vnet", "nodes", t0));
        assert!(!cache.subnet_exists("rg", "vnet", "apps", t0 + Duration::from_secs(60)));
    }

    #[test]
    fn writes_replace_or_drop_what_they_changed() {
        let cache = ArmCache::new(Duration::from_secs(60));
        let now = Instant::now();
        cache.put_load_balancer("rg", "kubernetes", Some(lb("kubernetes", "1")), now);
        cache.put_public_ips("rg", vec![Arc::new(PublicIp::default())], now);
        cache.put_public_ips("pips", vec![Arc::new(PublicIp::default())], now);
        cache.record(Written::PublicIps { rg: "RG" }, now);
        assert_eq!(cache.public_ips("rg", now), None);
        assert!(cache.public_ips("pips", now).is_some(), "other groups kept");
        cache.record(
            Written::LoadBalancer {
                rg: "rg",
                name: "kubernetes",
                stored: Some(lb("kubernetes", "2")),
            },
            now,
        );
        assert_eq!(
            cache.load_balancer("rg", "kubernetes", now),
            Some(Some(lb("kubernetes", "2")))
        );
        assert_eq!(
            cache.public_ips("pips", now),
            None,
            "a frontend change changes the public IPs it attaches or detaches"
        );
        cache.record(
            Written::LoadBalancer {
                rg: "rg",
                name: "kubernetes",
                stored: None,
            },
            now,
        );
        assert_eq!(cache.load_balancer("rg", "kubernetes", now), Some(None));
        cache.clear();
        assert_eq!(cache.load_balancer("rg", "kubernetes", now), None);
    }
}
