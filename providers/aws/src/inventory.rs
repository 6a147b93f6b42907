//! One listing of the cluster's Classic ELBs, NLBs (with target groups) and security groups, shared by the Services that
//! reconcile after a start (or after `FullResyncSeconds`).
//!
//! Without it, the first pass after a controller restart reads every load balancer with its own
//! `DescribeLoadBalancers`, `DescribeTags` and `DescribeSecurityGroups` although one paged
//! listing, tags in batches of 20 and one filtered group listing answer all of them. Each
//! Service uses the listing at most once: it is a snapshot, and the Service's own later changes
//! (or someone else's, repaired by the next full read) are not in it. After that first use, a
//! Service's reads are its own, scoped ones. A listing older than the refresh interval is taken
//! again, so the same saving applies to every full resync wave.
//!
//! Safe because a Service's load balancer and security-group rules are only changed by that
//! Service's reconcile, which runs once at a time per Service and only on the leader: a listing
//! taken by the leader cannot miss a change the leader itself has not made yet. What it can miss
//! (a load balancer created by a lost-response retry of a previous leader after the listing) is
//! caught by the create's `DuplicateLoadBalancerName`, which adopts it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::clb;
use crate::clb::plan::ClbObserved;
use crate::clients::Clients;
use crate::error::AwsError;
use crate::nlb;
use crate::nlb::io::Prefetched;
use crate::nlb::plan::NlbObserved;
use crate::nodes;
use crate::sg::{ObservedGroup, RuleChanges};

/// Listings shared by the reconciles of one provider.
#[derive(Debug, Default)]
pub(crate) struct Inventory {
    /// Held while a listing is taken, so concurrent reconciles wait for one listing instead of
    /// each taking their own.
    listing: tokio::sync::Mutex<()>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    clbs: Shared<ClbObserved>,
    nlbs: Shared<(NlbObserved, Prefetched)>,
    groups: HashMap<(String, BTreeSet<String>), Listing<Vec<ObservedGroup>>>,
    groups_touched: HashMap<String, Instant>,
}

/// One kind of load balancer, listed.
#[derive(Debug)]
struct Shared<T> {
    listing: Option<Listing<HashMap<String, T>>>,
    /// When each load balancer's listed state was last used or went stale (a change or a
    /// failure of ours): a listing started before that no longer speaks for it.
    touched: HashMap<String, Instant>,
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Shared {
            listing: None,
            touched: HashMap::new(),
        }
    }
}

impl<T> Shared<T> {
    fn fresh(&self, refresh_after: Duration) -> bool {
        self.listing
            .as_ref()
            .is_some_and(|listing| listing.fresh(refresh_after))
    }

    fn store(&mut self, started_at: Instant, value: HashMap<String, T>) {
        self.touched.retain(|_, at| *at >= started_at);
        self.listing = Some(Listing { started_at, value });
    }

    /// What the listing says of `name` (`Some(None)`: not listed), once; `None` when there is
    /// no listing or it does not speak for `name` any more.
    fn take(&mut self, name: &str) -> Option<Option<T>> {
        let listing = self.listing.as_mut()?;
        if !listing.speaks_for(self.touched.get(name)) {
            return None;
        }
        self.touched.insert(name.to_string(), Instant::now());
        Some(listing.value.remove(name))
    }
}

#[derive(Debug)]
struct Listing<T> {
    /// When the first call of the listing was sent.
    started_at: Instant,
    value: T,
}

impl<T> Listing<T> {
    fn fresh(&self, refresh_after: Duration) -> bool {
        self.started_at.elapsed() < refresh_after
    }

    fn speaks_for(&self, touched: Option<&Instant>) -> bool {
        touched.is_none_or(|at| *at < self.started_at)
    }
}

/// Names kube-lb (and the upstream provider) give load balancers: `a` and 31 hex digits of the
/// Service UID. Tags are read only for those.
pub(crate) fn named_like_ours(name: &str) -> bool {
    name.len() == 32 && name.starts_with('a') && name[1..].bytes().all(|b| b.is_ascii_hexdigit())
}

impl Inventory {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave a half-made State: every update is one
        // assignment. Carry on with what is there.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The Classic ELB `name` as the listing saw it, tags included: `Some(None)` when the
    /// listing has no such load balancer, `None` when this Service must read for itself (its
    /// listed state was used already or is stale).
    pub(crate) async fn take_clb(
        &self,
        clients: &Clients,
        name: &str,
        refresh_after: Duration,
    ) -> Result<Option<Option<ClbObserved>>, AwsError> {
        if !self.state().clbs.fresh(refresh_after) {
            let _listing = self.listing.lock().await;
            if !self.state().clbs.fresh(refresh_after) {
                let started_at = Instant::now();
                let listed = list_clbs(clients).await?;
                self.state().clbs.store(started_at, listed);
            }
        }
        Ok(self.state().clbs.take(name))
    }

    /// The NLB `name` as the listing saw it, with its target groups and tags; the same
    /// answers as [`Inventory::take_clb`].
    pub(crate) async fn take_nlb(
        &self,
        clients: &Clients,
        name: &str,
        refresh_after: Duration,
    ) -> Result<Option<Option<(NlbObserved, Prefetched)>>, AwsError> {
        if !self.state().nlbs.fresh(refresh_after) {
            let _listing = self.listing.lock().await;
            if !self.state().nlbs.fresh(refresh_after) {
                let started_at = Instant::now();
                let listed = nlb::io::list(clients, named_like_ours).await?;
                tracing::debug!(
                    load_balancers = listed.len(),
                    "listed the NLBs named like ours"
                );
                self.state()
                    .nlbs
                    .store(started_at, listed.into_iter().collect());
            }
        }
        Ok(self.state().nlbs.take(name))
    }

    /// [`nodes::observe_groups`] for `vpc` and the node groups `candidates`, shared: the first
    /// Service asking lists them, the others reuse the listing once each.
    pub(crate) async fn groups(
        &self,
        clients: &Clients,
        name: &str,
        cluster_tag: &str,
        vpc: &str,
        candidates: &BTreeSet<String>,
        refresh_after: Duration,
    ) -> Result<Vec<ObservedGroup>, AwsError> {
        let key = (vpc.to_string(), candidates.clone());
        // `Ok(groups)`: the listing speaks for this Service; `Err(true)`: a fresh listing
        // exists but not for this Service; `Err(false)`: no fresh listing.
        let listed = |state: &mut State| -> Result<Vec<ObservedGroup>, bool> {
            let State {
                groups,
                groups_touched,
                ..
            } = state;
            let listing = groups
                .get(&key)
                .filter(|listing| listing.fresh(refresh_after))
                .ok_or(false)?;
            if !listing.speaks_for(groups_touched.get(name)) {
                return Err(true);
            }
            groups_touched.insert(name.to_string(), Instant::now());
            Ok(listing.value.clone())
        };
        let mut answer = listed(&mut self.state());
        let _listing;
        if matches!(answer, Err(false)) {
            _listing = self.listing.lock().await;
            answer = listed(&mut self.state());
        }
        match answer {
            Ok(groups) => return Ok(groups),
            // Used once already: this Service's own, current view.
            Err(true) => {
                return nodes::observe_groups(clients, cluster_tag, Some(vpc), candidates).await;
            }
            Err(false) => {}
        }
        let started_at = Instant::now();
        let groups = nodes::observe_groups(clients, cluster_tag, Some(vpc), candidates).await?;
        let mut state = self.state();
        state
            .groups
            .retain(|_, listing| listing.fresh(refresh_after));
        state
            .groups_touched
            .retain(|_, at| at.elapsed() < refresh_after);
        state.groups.insert(
            key,
            Listing {
                started_at,
                value: groups.clone(),
            },
        );
        state
            .groups_touched
            .insert(name.to_string(), Instant::now());
        Ok(groups)
    }

    /// A change this process made to a group's rules, applied to every listing that holds
    /// the group: rules of one identity are shared between load balancers (the MTU rule), so
    /// a Service that uses a listing later must see what other Services changed since.
    pub(crate) fn applied(&self, group: &str, changes: &RuleChanges) {
        let mut state = self.state();
        for listing in state.groups.values_mut() {
            for observed in listing.value.iter_mut().filter(|g| g.id == group) {
                observed
                    .ingress
                    .retain(|rule| !changes.revoke.contains(rule));
                for rule in &changes.authorize {
                    if !observed
                        .ingress
                        .iter()
                        .any(|have| have.identity() == rule.identity())
                    {
                        observed.ingress.push(rule.clone());
                    }
                }
            }
        }
    }

    /// A change to some group's rules failed part way: no listing of groups can be trusted.
    pub(crate) fn forget_groups(&self) {
        self.state().groups.clear();
    }

    /// After a change to (or a failure on) `name`'s resources, whatever a listing taken before
    /// says of them is stale: the Service reads for itself until the next listing.
    pub(crate) fn forget(&self, name: &str) {
        let now = Instant::now();
        let mut state = self.state();
        state.clbs.touched.insert(name.to_string(), now);
        state.nlbs.touched.insert(name.to_string(), now);
        state.groups_touched.insert(name.to_string(), now);
    }
}

/// Every Classic ELB named like ours, with its tags.
async fn list_clbs(clients: &Clients) -> Result<HashMap<String, ClbObserved>, AwsError> {
    let mut listed = clb::io::list(clients).await?;
    listed.retain(|name, _| named_like_ours(name));
    let names: Vec<String> = listed.keys().cloned().collect();
    let mut tags = clb::io::read_tags_of(clients, &names).await?;
    // A load balancer deleted between the two calls has no tags entry: leave it out.
    listed.retain(|name, _| tags.contains_key(name));
    for (name, observed) in &mut listed {
        observed.tags = tags.remove(name);
    }
    tracing::debug!(
        load_balancers = listed.len(),
        "listed the Classic ELBs named like ours"
    );
    Ok(listed.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(names: &[&str]) -> HashMap<String, u32> {
        names.iter().map(|n| (n.to_string(), 1)).collect()
    }

    #[test]
    fn a_listing_speaks_for_each_load_balancer_once_and_never_after_a_change_of_ours() {
        let mut shared: Shared<u32> = Shared::default();
        assert_eq!(shared.take("a"), None, "no listing yet: read for yourself");

        // A change of ours to `b` before the listing started: the listing saw it.
        let started = Instant::now();
        let before = started
            .checked_sub(Duration::from_millis(1))
            .unwrap_or(started);
        shared.touched.insert("b".into(), before);
        shared.store(started, listed(&["a", "b"]));
        assert_eq!(shared.take("a"), Some(Some(1)), "listed");
        assert_eq!(shared.take("a"), None, "used once already");
        assert_eq!(
            shared.take("b"),
            Some(Some(1)),
            "changed before the listing"
        );
        assert_eq!(shared.take("c"), Some(None), "not listed: absent");

        // A change (or a failure) after the listing started: the listing is stale for it.
        let mut shared: Shared<u32> = Shared::default();
        shared.store(started, listed(&["d"]));
        shared
            .touched
            .insert("d".into(), started + Duration::from_millis(1));
        assert_eq!(shared.take("d"), None);

        assert!(shared.fresh(Duration::from_secs(3600)));
        assert!(!shared.fresh(Duration::ZERO));
    }

    #[test]
    fn only_names_of_the_uid_form_are_ours() {
        for (name, ours) in [
            ("a0123456789abcdef0123456789abcde", true),
            ("a0123456789abcdef0123456789abcd", false),
            ("b0123456789abcdef0123456789abcde", false),
            ("a0123456789abcdef0123456789abcdz", false),
            ("k8s-elb-a0123456789abcdef0123456", false),
        ] {
            assert_eq!(named_like_ours(name), ours, "{name}");
        }
    }
}
