//! What every Service's sync would otherwise look up again: the node VMs (zone, name → network
//! tags) and the cluster-wide pieces all Services share (the node health check and its
//! firewall, the per-zone instance groups). One copy serves every Service, so a resync after
//! a restart reads each load balancer's own resources and the shared ones once, not once per
//! Service.
//!
//! Entries expire after a TTL (drift made by someone else is seen within it), are replaced
//! by what this provider writes ([`Cache::forget_touched`]), and the whole cache is dropped
//! when a sync fails ([`Cache::clear`]): a "not found" from the cloud may mean a VM or a
//! shared object went away behind our back, and the next sync must look again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::model::{Firewall, HealthCheck, HealthCheckKind, InstanceGroup};
use crate::plan::Action;

/// How long a cached lookup is trusted when nothing invalidated it.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
struct Timed<T> {
    value: T,
    at: Instant,
}

/// A cached shared object, or the knowledge that it does not exist.
type Slot<T> = Timed<Option<T>>;

#[derive(Debug, Default)]
struct Inner {
    /// (zone, instance name) → network tags of a VM that exists.
    instances: BTreeMap<(String, String), Timed<Vec<String>>>,
    health_checks: BTreeMap<(HealthCheckKind, String), Slot<HealthCheck>>,
    firewalls: BTreeMap<String, Slot<Firewall>>,
    /// (zone, name).
    groups: BTreeMap<(String, String), Slot<InstanceGroup>>,
}

/// The provider-wide lookup cache. Never held across an `.await`.
#[derive(Debug)]
pub struct Cache {
    ttl: Duration,
    inner: Mutex<Inner>,
}

fn fresh<T: Clone>(slot: Option<&Timed<T>>, now: Instant, ttl: Duration) -> Option<T> {
    slot.filter(|t| now.saturating_duration_since(t.at) < ttl)
        .map(|t| t.value.clone())
}

impl Cache {
    /// An empty cache whose entries live `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Cache {
            ttl,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached tags of each of `names` in `zone` at `now`, or `None` when any of them is
    /// missing or expired (the caller then lists the zone's names in one call).
    pub fn instances(
        &self,
        zone: &str,
        names: &[String],
        now: Instant,
    ) -> Option<Vec<(String, Vec<String>)>> {
        let inner = self.inner();
        names
            .iter()
            .map(|name| {
                fresh(
                    inner.instances.get(&(zone.to_string(), name.clone())),
                    now,
                    self.ttl,
                )
                .map(|tags| (name.clone(), tags))
            })
            .collect()
    }

    /// Records the VMs one zone's lookup found. Names it did not find are not remembered: a
    /// node whose VM is missing is looked up again on the next sync rather than left out of
    /// every load balancer for a TTL.
    pub fn put_instances(&self, zone: &str, found: &[(String, Vec<String>)], now: Instant) {
        let mut inner = self.inner();
        for (name, tags) in found {
            inner.instances.insert(
                (zone.to_string(), name.clone()),
                Timed {
                    value: tags.clone(),
                    at: now,
                },
            );
        }
    }

    /// A cached shared health check (`Some(None)`: known not to exist).
    pub fn health_check(
        &self,
        kind: HealthCheckKind,
        name: &str,
        now: Instant,
    ) -> Option<Option<HealthCheck>> {
        fresh(
            self.inner().health_checks.get(&(kind, name.to_string())),
            now,
            self.ttl,
        )
    }

    /// Remembers a shared health check as read.
    pub fn put_health_check(
        &self,
        kind: HealthCheckKind,
        name: &str,
        value: Option<HealthCheck>,
        now: Instant,
    ) {
        self.inner()
            .health_checks
            .insert((kind, name.to_string()), Timed { value, at: now });
    }

    /// A cached shared firewall (`Some(None)`: known not to exist).
    pub fn firewall(&self, name: &str, now: Instant) -> Option<Option<Firewall>> {
        fresh(self.inner().firewalls.get(name), now, self.ttl)
    }

    /// Remembers a shared firewall as read.
    pub fn put_firewall(&self, name: &str, value: Option<Firewall>, now: Instant) {
        self.inner()
            .firewalls
            .insert(name.to_string(), Timed { value, at: now });
    }

    /// A cached instance group (`Some(None)`: known not to exist).
    pub fn group(&self, zone: &str, name: &str, now: Instant) -> Option<Option<InstanceGroup>> {
        fresh(
            self.inner()
                .groups
                .get(&(zone.to_string(), name.to_string())),
            now,
            self.ttl,
        )
    }

    /// Remembers an instance group as read.
    pub fn put_group(&self, zone: &str, name: &str, value: Option<InstanceGroup>, now: Instant) {
        self.inner().groups.insert(
            (zone.to_string(), name.to_string()),
            Timed { value, at: now },
        );
    }

    /// Drops the entries an action is about to change (or changed), so the next sync reads
    /// them back instead of planning against what they were.
    pub fn forget_touched(&self, action: &Action) {
        let touched = touched(action);
        let mut inner = self.inner();
        for key in touched.health_checks {
            inner.health_checks.remove(&key);
        }
        for name in touched.firewalls {
            inner.firewalls.remove(&name);
        }
        for key in touched.groups {
            inner.groups.remove(&key);
        }
    }

    /// Forgets everything (after a failed sync).
    pub fn clear(&self) {
        *self.inner() = Inner::default();
    }
}

/// The cacheable objects one action writes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Touched {
    /// Health checks, by kind and name.
    pub health_checks: BTreeSet<(HealthCheckKind, String)>,
    /// Firewalls, by name.
    pub firewalls: BTreeSet<String>,
    /// Instance groups, by zone and name.
    pub groups: BTreeSet<(String, String)>,
}

/// What `action` writes among the objects the cache may hold.
pub fn touched(action: &Action) -> Touched {
    let mut out = Touched::default();
    match action {
        Action::InsertHealthCheck(hc) | Action::UpdateHealthCheck(hc) => {
            out.health_checks.insert((hc.kind, hc.name.clone()));
        }
        Action::DeleteHealthCheck {
            kind,
            name,
            firewall,
        } => {
            out.health_checks.insert((*kind, name.clone()));
            out.firewalls.insert(firewall.clone());
        }
        Action::InsertFirewall(f) | Action::UpdateFirewall(f) => {
            out.firewalls.insert(f.name.clone());
        }
        Action::DeleteFirewall(name) => {
            out.firewalls.insert(name.clone());
        }
        Action::InsertInstanceGroup { zone, name }
        | Action::AddGroupInstances { zone, name, .. }
        | Action::RemoveGroupInstances { zone, name, .. }
        | Action::DeleteInstanceGroup { zone, name } => {
            out.groups.insert((zone.clone(), name.clone()));
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::HealthCheckKind::LegacyHttp;

    type Tagged = Vec<(String, Vec<String>)>;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn instances_are_served_only_when_every_name_is_fresh() {
        let cache = Cache::new(Duration::from_secs(60));
        let t0 = Instant::now();
        // n2 was asked for but has no VM: not remembered.
        cache.put_instances(
            "z",
            &[("n1".into(), vec!["tag".into()]), ("n3".into(), Vec::new())],
            t0,
        );
        // (asked, seconds later, expected answer)
        let cases: [(&[&str], u64, Option<Tagged>); 5] = [
            (
                &["n1", "n3"],
                1,
                Some(vec![
                    ("n1".into(), vec!["tag".into()]),
                    ("n3".into(), Vec::new()),
                ]),
            ),
            (&["n1"], 59, Some(vec![("n1".into(), vec!["tag".into()])])),
            (&["n1", "n2"], 1, None),
            (&["n1"], 60, None),
            (&[], 1, Some(Vec::new())),
        ];
        for (asked, later, want) in cases {
            let got = cache.instances("z", &names(asked), t0 + Duration::from_secs(later));
            assert_eq!(got, want, "{asked:?} after {later}s");
        }
        assert_eq!(cache.instances("other", &names(&["n1"]), t0), None);
    }

    #[test]
    fn writes_forget_exactly_what_they_touch() {
        let cache = Cache::new(Duration::from_secs(60));
        let now = Instant::now();
        cache.put_health_check(LegacyHttp, "k8s-c1-node", None, now);
        cache.put_firewall("k8s-c1-node-http-hc", None, now);
        cache.put_firewall("other", None, now);
        cache.put_group("z", "k8s-ig--c1", None, now);
        let cases = [
            (
                Action::DeleteHealthCheck {
                    kind: LegacyHttp,
                    name: "k8s-c1-node".into(),
                    firewall: "k8s-c1-node-http-hc".into(),
                },
                (false, false, true, true),
            ),
            (
                Action::AddGroupInstances {
                    zone: "z".into(),
                    name: "k8s-ig--c1".into(),
                    instances: BTreeSet::new(),
                },
                (true, true, true, false),
            ),
            (
                Action::DeleteForwardingRule("a1".into()),
                (true, true, true, true),
            ),
        ];
        for (action, (hc, hc_fw, other_fw, group)) in cases {
            cache.put_health_check(LegacyHttp, "k8s-c1-node", None, now);
            cache.put_firewall("k8s-c1-node-http-hc", None, now);
            cache.put_group("z", "k8s-ig--c1", None, now);
            cache.forget_touched(&action);
            assert_eq!(
                cache.health_check(LegacyHttp, "k8s-c1-node", now).is_some(),
                hc,
                "{action:?}"
            );
            assert_eq!(
                cache.firewall("k8s-c1-node-http-hc", now).is_some(),
                hc_fw,
                "{action:?}"
            );
            assert_eq!(cache.firewall("other", now).is_some(), other_fw);
            assert_eq!(
                cache.group("z", "k8s-ig--c1", now).is_some(),
                group,
                "{action:?}"
            );
        }
        cache.clear();
        assert_eq!(cache.firewall("other", now), None);
    }
}
