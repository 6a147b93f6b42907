//! Layer-2 announcement of Service load-balancer addresses (`kube-lb proxy --l2-announce`): on
//! a network without a cloud, a node answers ARP (IPv4) and NDP (IPv6) for each address so the
//! LAN sends its traffic there, and another node takes over when it fails.
//!
//! # What is announced
//!
//! The addresses in the `.status.loadBalancer.ingress[].ip` of `type: LoadBalancer` Services
//! (the allocator writes them), and nothing else: no ARP or NDP answer is ever sent for an
//! address that is not assigned to a Service. Loopback, link-local, multicast and unspecified
//! addresses (the `local` provider's single-machine default pool is 127.0.0.0/8) are never
//! announced ([`election::claims`]).
//!
//! # Who announces: one lease per node, a hash per address
//!
//! Every node with the flag holds one `coordination.k8s.io/v1` Lease,
//! `kube-lb-l2-<node>` in `--l2-lease-namespace`, labelled `kube-lb.io/l2-announcer=true`,
//! renewed (one server-side apply) every `--l2-renew-interval` (0.5 s) and live for
//! `--l2-lease-duration` (1.5 s) after a node *saw* it change: each node measures expiry on its
//! own clock from the moment its lease watch delivered the renewal, so node clocks need not
//! agree. Renewals stop while the node's rules are stale (`/healthz` failing) and before the
//! proxy's first sync, so a node never attracts traffic it cannot forward.
//!
//! The candidates for an address are the live nodes whose Node object does not veto them
//! (the controller's rule, `kube_lb_provider_core::eligibility`: being deleted or tainted by the
//! autoscaler, `node.kubernetes.io/exclude-from-external-load-balancers`, Ready not True);
//! for a Service with `externalTrafficPolicy: Local` only those with a ready endpoint of the
//! Service in its EndpointSlices (when Services share the address a node must suit all of them;
//! if none does, one that suits any). Among the candidates the node with the highest
//! rendezvous hash `rank(node, address)` ([`election::rank`]) announces. All inputs come from
//! watches every node holds, so every node computes the same answer and announces exactly its
//! own share; nobody negotiates per address.
//!
//! A node counts itself live only while its own renewals succeed, so a node cut off from the
//! API server (its link cut, say) stops answering about when the others see its lease expire
//! and take over. A clean stop deletes the lease: the others take over at once. If the lease
//! watch goes silent although this node's renewals succeed (each renewal is an event it should
//! carry), it is restarted instead of acted upon.
//!
//! On takeover the new node sends gratuitous ARP (IPv4) and unsolicited neighbour
//! advertisements with the override flag (IPv6), three times (0, 0.25 s, 1 s), so neighbours
//! move their cache entry at once instead of when it goes stale.
//!
//! ## API load
//!
//! The election costs one write per node per renewal interval, whatever the number of
//! Services: 10 nodes renewing every 0.5 s make **20 requests/s for 1,000 Services, as for 1 or
//! 100,000**, plus 20 watch events/s delivered to each of the 10 lease watchers (200 events/s
//! on open streams, no requests), plus one list per lease watch (re)start. Services,
//! EndpointSlices and Nodes are watched as the proxy already does. Events on Services are
//! written only when an address changes hands. Per-Service leases (the anti-pattern this
//! replaces) cost one renewal per Service per period by its holder plus the others' retries:
//! 1,000 Services with client-go's usual 2 s retry period on 10 nodes are ~5,000 requests/s.
//!
//! ## Failover time
//!
//! A killed node's lease expires 1.0–1.5 s after its last renewal (1.5 s expiry, renewals every
//! 0.5 s); the loop notices within 50 ms and the new holder sends gratuitous ARP at once.
//! `bench/l2_failover.rs` measures kill-to-first-successful-connection.
//!
//! ## Where to see who announces
//!
//! - An `L2Announcing` Normal event on each Service when a node takes its address over
//!   (`kubectl describe service`), naming the node and interfaces; an `L2NotAnnounced` Warning
//!   when no live node may announce it (e.g. `externalTrafficPolicy: Local` without ready
//!   endpoints), written by one node only.
//! - The gauge `kube_lb_l2_announcing{service,ip,interface}` on the announcing node's
//!   `--l2-metrics-addr` `/metrics`, with `kube_lb_l2_live_nodes`, renewal counters and
//!   `kube_lb_l2_takeovers_total`.
//! - Logs (`announcing`, `stopped announcing`, `announcer nodes`), and the live announcers
//!   themselves: `kubectl get leases -n <ns> -l kube-lb.io/l2-announcer=true`.
//!
//! # Modules
//!
//! [`election`] (pure), [`packet`] (pure frame building and parsing), [`socket`] (raw
//! `AF_PACKET` sockets), [`responder`] (per-interface ARP/NDP answering), `announcer` (the watch
//! loop, feature `watch`) and [`lab`] (network-namespace rig for the tests and the benchmark).

#[cfg(feature = "watch")]
pub mod announcer;
pub mod election;
pub mod lab;
pub mod packet;
pub mod responder;
pub mod socket;
