//! One listing of the project's load balancers, listeners, pools, health monitors and floating
//! IPs, shared by the Services of a resync wave, plus a cache of pool members.
//!
//! Without it every Service reads its load balancer by name, its listeners, its pools, and per
//! pool the members and the monitor, then its floating IP: 4 + 2 per port (upstream does the
//! same on every sync). With it a wave costs five list calls in all (fewer when nothing has a
//! monitor or no listener exists), whatever the number of Services, and the members of a pool
//! are read again only when the pool's member ids (which the pool listing carries) changed:
//! an Octavia member's address and port are immutable, so an unchanged id set means unchanged
//! members.
//!
//! Each Service uses a listing at most once: it is a snapshot, and that Service's own later
//! changes are not in it. A load balancer changed by kube-lb after the listing was taken is no
//! longer answered from it either. A listing older than the refresh interval is taken again,
//! so every resync wave gets the saving. The listing never decides that something is absent:
//! a load balancer missing from it is looked up by name before one is created.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::client::OpenStackClient;
use crate::error::OpenStackError;
use crate::model::{FloatingIp, HealthMonitor, Listener, LoadBalancer, Member, Pool, Port};
use crate::plan::Observed;

/// A listing of the project.
#[derive(Debug)]
pub(crate) struct Snapshot {
    taken_at: Instant,
    by_name: HashMap<String, Vec<LoadBalancer>>,
    listeners: HashMap<String, Vec<Listener>>,
    pools: HashMap<String, Vec<Pool>>,
    monitors: HashMap<String, HealthMonitor>,
    floating_ips: HashMap<String, Vec<FloatingIp>>,
}

impl Snapshot {
    /// Builds the indexes from the four (or five) lists (pure).
    pub(crate) fn index(
        taken_at: Instant,
        load_balancers: Vec<LoadBalancer>,
        listeners: Vec<Listener>,
        pools: Vec<Pool>,
        monitors: Vec<HealthMonitor>,
        floating_ips: Vec<FloatingIp>,
    ) -> Snapshot {
        let mut snapshot = Snapshot {
            taken_at,
            by_name: HashMap::new(),
            listeners: HashMap::new(),
            pools: HashMap::new(),
            monitors: monitors.into_iter().map(|m| (m.id.clone(), m)).collect(),
            floating_ips: HashMap::new(),
        };
        for lb in load_balancers {
            snapshot
                .by_name
                .entry(lb.name.clone())
                .or_default()
                .push(lb);
        }
        for listener in listeners {
            if let Some(lb) = listener.loadbalancers.first() {
                snapshot
                    .listeners
                    .entry(lb.id.clone())
                    .or_default()
                    .push(listener);
            }
        }
        for pool in pools {
            if let Some(lb) = pool.loadbalancers.first() {
                snapshot.pools.entry(lb.id.clone()).or_default().push(pool);
            }
        }
        for fip in floating_ips {
            if let Some(port) = fip.port_id.clone().filter(|p| !p.is_empty()) {
                snapshot.floating_ips.entry(port).or_default().push(fip);
            }
        }
        snapshot
    }

    /// Load balancers named `name`.
    pub(crate) fn named(&self, name: &str) -> Vec<LoadBalancer> {
        self.by_name.get(name).cloned().unwrap_or_default()
    }

    /// Listeners, pools and monitors of `lb_id` (members are filled in separately).
    pub(crate) fn observed(&self, lb_id: &str) -> Observed {
        let pools = self.pools.get(lb_id).cloned().unwrap_or_default();
        let monitors = pools
            .iter()
            .filter_map(|p| p.healthmonitor_id.as_ref())
            .filter_map(|id| self.monitors.get(id).map(|m| (id.clone(), m.clone())))
            .collect();
        Observed {
            listeners: self.listeners.get(lb_id).cloned().unwrap_or_default(),
            pools,
            members: BTreeMap::new(),
            monitors,
        }
    }

    /// Floating IPs associated with `port_id`.
    pub(crate) fn floating_ips_on(&self, port_id: &str) -> Vec<FloatingIp> {
        self.floating_ips.get(port_id).cloned().unwrap_or_default()
    }
}

#[derive(Debug, Default)]
struct State {
    snapshot: Option<Arc<Snapshot>>,
    /// Load-balancer names already answered from the current snapshot.
    used: HashSet<String>,
    /// When kube-lb last changed each load balancer.
    touched: HashMap<String, Instant>,
    /// Members by pool id, with the sorted member ids they were read under.
    members: HashMap<String, (Vec<String>, Vec<Member>)>,
    /// The ports last listed for the backend nodes' addresses (member-subnet discovery).
    node_ports: Option<NodePorts>,
}

/// Ports listed for a set of node addresses, and when.
#[derive(Debug)]
struct NodePorts {
    /// The addresses asked for, sorted.
    addresses: Vec<String>,
    ports: Vec<Port>,
    taken: Instant,
}

/// Listings shared by the reconciles of one provider.
#[derive(Debug)]
pub(crate) struct Inventory {
    /// Held while a listing is taken, so concurrent reconciles wait for one listing.
    listing: tokio::sync::Mutex<()>,
    state: Mutex<State>,
    refresh_after: Duration,
}

fn sorted_ids(pool: &Pool) -> Vec<String> {
    let mut ids: Vec<String> = pool.members.iter().map(|m| m.id.clone()).collect();
    ids.sort();
    ids
}

impl Inventory {
    /// An inventory whose listings are reused for `refresh_after`.
    pub(crate) fn new(refresh_after: Duration) -> Inventory {
        Inventory {
            listing: tokio::sync::Mutex::new(()),
            state: Mutex::new(State::default()),
            refresh_after,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The snapshot for the Service whose load balancer is `name`, once per listing; a new
    /// listing is taken when the last is older than the refresh interval. `None` when this
    /// Service already used the current one (its reads are then its own).
    pub(crate) async fn snapshot_for(
        &self,
        name: &str,
        client: &OpenStackClient,
    ) -> Result<Option<Arc<Snapshot>>, OpenStackError> {
        if self.refresh_after.is_zero() {
            return Ok(None);
        }
        if let Some(answer) = self.fresh_for(name) {
            return Ok(answer);
        }
        let _listing = self.listing.lock().await;
        // Another reconcile may have taken it while this one waited.
        if let Some(answer) = self.fresh_for(name) {
            return Ok(answer);
        }
        let taken_at = Instant::now();
        let load_balancers = client.load_balancers().await?;
        let listeners = if load_balancers.is_empty() {
            Vec::new()
        } else {
            client.listeners_matching(&[]).await?
        };
        let pools = if listeners.is_empty() {
            Vec::new()
        } else {
            client.all_pools().await?
        };
        let monitors = if pools.iter().any(|p| p.healthmonitor_id.is_some()) {
            client.health_monitors().await?
        } else {
            Vec::new()
        };
        let floating_ips = if load_balancers.is_empty() {
            Vec::new()
        } else {
            client.floating_ips(&[]).await?
        };
        tracing::debug!(
            load_balancers = load_balancers.len(),
            listeners = listeners.len(),
            pools = pools.len(),
            "took a project listing for this resync wave"
        );
        let snapshot = Arc::new(Snapshot::index(
            taken_at,
            load_balancers,
            listeners,
            pools,
            monitors,
            floating_ips,
        ));
        let mut state = self.state();
        state.snapshot = Some(snapshot.clone());
        state.used.clear();
        state.touched.retain(|_, at| *at >= taken_at);
        state.used.insert(name.to_string());
        Ok(Some(snapshot))
    }

    /// `Some(answer)` when a fresh snapshot exists: itself (marking `name` used), or `None`
    /// when `name` already used it. `None` when a new listing is due.
    fn fresh_for(&self, name: &str) -> Option<Option<Arc<Snapshot>>> {
        let mut state = self.state();
        let snapshot = state
            .snapshot
            .clone()
            .filter(|s| s.taken_at.elapsed() < self.refresh_after)?;
        Some(state.used.insert(name.to_string()).then_some(snapshot))
    }

    /// True when `snapshot` still speaks for `lb_id` (kube-lb has not changed it since).
    pub(crate) fn speaks_for(&self, snapshot: &Snapshot, lb_id: &str) -> bool {
        self.state()
            .touched
            .get(lb_id)
            .is_none_or(|at| *at < snapshot.taken_at)
    }

    /// Records that kube-lb changed `lb_id`.
    pub(crate) fn touch(&self, lb_id: &str) {
        self.state()
            .touched
            .insert(lb_id.to_string(), Instant::now());
    }

    /// The ports last listed for exactly `addresses` (sorted), while younger than the refresh
    /// interval: every Service of a resync wave finds its member subnet from the same nodes,
    /// so one port listing serves the wave instead of one per Service.
    pub(crate) fn cached_node_ports(&self, addresses: &[&str]) -> Option<Vec<Port>> {
        if self.refresh_after.is_zero() {
            return None;
        }
        let state = self.state();
        let cached = state.node_ports.as_ref()?;
        let same = cached
            .addresses
            .iter()
            .map(String::as_str)
            .eq(addresses.iter().copied());
        (same && cached.taken.elapsed() < self.refresh_after).then(|| cached.ports.clone())
    }

    /// Records the ports just listed for `addresses` (sorted).
    pub(crate) fn remember_node_ports(&self, addresses: &[&str], ports: &[Port]) {
        self.state().node_ports = Some(NodePorts {
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
            ports: ports.to_vec(),
            taken: Instant::now(),
        });
    }

    /// The cached members of `pool` when its member ids are those they were read under.
    pub(crate) fn cached_members(&self, pool: &Pool) -> Option<Vec<Member>> {
        let state = self.state();
        let (ids, members) = state.members.get(&pool.id)?;
        (*ids == sorted_ids(pool)).then(|| members.clone())
    }

    /// Drops what is cached for `pool_id`'s members: a batch update changes members in place
    /// (same ids, new port or address), so the id check alone cannot notice it.
    pub(crate) fn forget_members(&self, pool_id: &str) {
        self.state().members.remove(pool_id);
    }

    /// Remembers `members` as read for `pool_id`.
    pub(crate) fn remember_members(&self, pool_id: &str, members: &[Member]) {
        let mut ids: Vec<String> = members.iter().map(|m| m.id.clone()).collect();
        ids.sort();
        self.state()
            .members
            .insert(pool_id.to_string(), (ids, members.to_vec()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::IdRef;

    fn pool(id: &str, lb: &str, members: &[&str]) -> Pool {
        Pool {
            id: id.into(),
            name: String::new(),
            protocol: "TCP".into(),
            lb_algorithm: "ROUND_ROBIN".into(),
            listeners: Vec::new(),
            healthmonitor_id: None,
            members: members.iter().map(|m| IdRef { id: (*m).into() }).collect(),
            loadbalancers: vec![IdRef { id: lb.into() }],
        }
    }

    fn member(id: &str) -> Member {
        Member {
            id: id.into(),
            name: "n".into(),
            address: "10.0.0.1".into(),
            protocol_port: 30080,
            monitor_port: None,
            subnet_id: None,
        }
    }

    #[test]
    fn members_are_reused_only_under_the_same_ids() {
        let inventory = Inventory::new(Duration::from_secs(30));
        inventory.remember_members("p", &[member("b"), member("a")]);
        assert_eq!(
            inventory
                .cached_members(&pool("p", "lb", &["a", "b"]))
                .map(|m| m.len()),
            Some(2)
        );
        assert_eq!(
            inventory.cached_members(&pool("p", "lb", &["a", "c"])),
            None
        );
        assert_eq!(inventory.cached_members(&pool("p", "lb", &["a"])), None);
        inventory.forget_members("p");
        assert_eq!(
            inventory.cached_members(&pool("p", "lb", &["a", "b"])),
            None,
            "a batch update changes members in place: the next read must go to the cloud"
        );
        assert_eq!(
            inventory.cached_members(&pool("q", "lb", &["a", "b"])),
            None
        );
    }

    #[test]
    fn snapshot_indexes_by_load_balancer_and_port() {
        let snapshot = Snapshot::index(
            Instant::now(),
            Vec::new(),
            Vec::new(),
            vec![pool("p1", "lb1", &[]), pool("p2", "lb2", &[])],
            Vec::new(),
            vec![FloatingIp {
                id: "f".into(),
                floating_ip_address: "203.0.113.1".into(),
                port_id: Some("vip".into()),
                description: String::new(),
                created_at: None,
            }],
        );
        assert_eq!(snapshot.observed("lb1").pools.len(), 1);
        assert_eq!(snapshot.observed("lb3").pools.len(), 0);
        assert_eq!(snapshot.floating_ips_on("vip").len(), 1);
        assert!(snapshot.floating_ips_on("other").is_empty());
    }

    /// Node ports are answered from the last listing only for the same addresses, and only
    /// while it is fresh; a zero refresh never caches.
    #[test]
    fn node_ports_are_reused_only_for_the_same_addresses_while_fresh() {
        let port: Port = serde_json::from_value(serde_json::json!({"id": "p-1"})).unwrap();
        let inventory = Inventory::new(Duration::from_secs(30));
        assert_eq!(inventory.cached_node_ports(&["10.0.0.1"]), None);
        inventory.remember_node_ports(&["10.0.0.1", "10.0.0.2"], std::slice::from_ref(&port));
        assert_eq!(
            inventory.cached_node_ports(&["10.0.0.1", "10.0.0.2"]),
            Some(vec![port.clone()])
        );
        assert_eq!(inventory.cached_node_ports(&["10.0.0.1"]), None);
        assert_eq!(inventory.cached_node_ports(&["10.0.0.1", "10.0.0.3"]), None);

        let expired = Inventory::new(Duration::from_millis(1));
        expired.remember_node_ports(&["10.0.0.1"], std::slice::from_ref(&port));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(expired.cached_node_ports(&["10.0.0.1"]), None);

        let never = Inventory::new(Duration::ZERO);
        never.remember_node_ports(&["10.0.0.1"], &[port]);
        assert_eq!(never.cached_node_ports(&["10.0.0.1"]), None);
    }

    #[test]
    fn each_name_uses_a_snapshot_once_and_changes_invalidate_it() {
        let inventory = Inventory::new(Duration::from_secs(30));
        let snapshot = Arc::new(Snapshot::index(
            Instant::now(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        ));
        inventory.state().snapshot = Some(snapshot.clone());
        assert!(matches!(inventory.fresh_for("a"), Some(Some(_))));
        assert!(matches!(inventory.fresh_for("a"), Some(None)), "used once");
        assert!(matches!(inventory.fresh_for("b"), Some(Some(_))));
        assert!(inventory.speaks_for(&snapshot, "lb"));
        inventory.touch("lb");
        assert!(!inventory.speaks_for(&snapshot, "lb"));
        let stale = Inventory::new(Duration::ZERO);
        stale.state().snapshot = Some(snapshot);
        assert!(stale.fresh_for("c").is_none(), "a new listing is due");
    }
}
