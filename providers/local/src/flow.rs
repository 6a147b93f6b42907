//! `ensure` and `delete` of the `local` provider, each written once as a
//! [`converge::Flow`]: `kube-lb plan` renders the same steps `ensure` and `delete` run.
//!
//! One phase, no placeholders: the pool is in this process, so an allocation's result (the
//! address) is known when it is planned. The allocation is planned again under the allocator's
//! lock when it runs, because a concurrent `ensure` of another Service may have taken the
//! planned address meanwhile; the step then commits what that lock decided (the same choice
//! unless the pool changed in between).

use async_trait::async_trait;
use kube_lb_annotations::{LoadBalancerSpec, ServiceKey};
use kube_lb_provider_core::converge::{self, Flow, Plan};
use kube_lb_provider_core::{
    CallKind, ChangeAction, LoadBalancerStatus, PlannedChange, ProviderError,
};

use crate::alloc::{AllocError, Allocator, Choice, Request};
use crate::{
    ALLOCATE, FAMILY, LocalLoadBalancer, LocalProvider, PROVIDER_NAME, RELEASE, RESOURCE_KIND,
    Step as Decision, alloc_error, describe_ports, describe_ranges, step_for,
};

/// The one mutating operation of each `local` flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LocalStep {
    /// Hand out (or move, or change what is served on) the Service's addresses.
    Allocate {
        /// What will be served.
        desired: Box<LocalLoadBalancer>,
        /// The addresses held or served before, if any.
        old_addresses: Option<String>,
        /// What was served before, if anything (its ports and ranges, for the plan's fields).
        published: Option<Box<LocalLoadBalancer>>,
    },
    /// Free the Service's addresses.
    Release {
        /// The addresses, as the plan names them.
        addresses: String,
    },
}

impl converge::Step for LocalStep {
    fn describe(&self) -> PlannedChange {
        match self {
            LocalStep::Allocate {
                desired,
                old_addresses,
                published,
            } => allocate_change(desired, old_addresses.as_deref(), published.as_deref()),
            LocalStep::Release { addresses } => {
                PlannedChange::new(ChangeAction::Delete, RESOURCE_KIND, addresses, RELEASE)
            }
        }
    }
}

fn allocate_change(
    desired: &LocalLoadBalancer,
    old: Option<&str>,
    published: Option<&LocalLoadBalancer>,
) -> PlannedChange {
    let new_addresses = desired.addresses();
    let Some(old) = old else {
        let create = PlannedChange::new(
            ChangeAction::Create,
            RESOURCE_KIND,
            new_addresses.clone(),
            ALLOCATE,
        )
        .field("address", None, Some(new_addresses))
        .field("ports", None, Some(describe_ports(&desired.ports)));
        return match describe_ranges(&desired.source_ranges) {
            Some(ranges) => create.field("sourceRanges", None, Some(ranges)),
            None => create,
        };
    };
    let mut modify = PlannedChange::new(ChangeAction::Modify, RESOURCE_KIND, old, ALLOCATE);
    if old != new_addresses {
        modify = modify.field("address", Some(old.to_string()), Some(new_addresses));
    }
    if let Some(lb) = published {
        if lb.ports != desired.ports {
            modify = modify.field(
                "ports",
                Some(describe_ports(&lb.ports)),
                Some(describe_ports(&desired.ports)),
            );
        }
        if lb.source_ranges != desired.source_ranges {
            modify = modify.field(
                "sourceRanges",
                describe_ranges(&lb.source_ranges),
                describe_ranges(&desired.source_ranges),
            );
        }
    }
    modify
}

fn joined(ips: &[std::net::IpAddr]) -> String {
    ips.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The plan of `ensure` for `spec`, from what is served (`published`) and what the allocator
/// holds, and the decision it rests on: pure. In sync, or only republished after adoption (a
/// fresh process: the controller after a restart, or `kube-lb plan`), is no step at all.
pub(crate) fn plan_ensure(
    spec: &LoadBalancerSpec,
    published: Option<&LocalLoadBalancer>,
    allocator: &Allocator,
) -> Result<(Plan<LocalStep>, Choice, Decision), AllocError> {
    let req = Request::from_spec(spec);
    let (choice, decision) = step_for(spec, &req, published, allocator)?;
    let plan = match &decision {
        Decision::InSync(_) | Decision::Republish(_) => Plan::default(),
        Decision::Allocate(desired) => {
            let old_addresses = published
                .map(LocalLoadBalancer::addresses)
                .or_else(|| allocator.claimed(&spec.service).map(|h| joined(&h.ips)));
            Plan::now(vec![LocalStep::Allocate {
                desired: Box::new(desired.clone()),
                old_addresses,
                published: published.cloned().map(Box::new),
            }])
        }
    };
    Ok((plan, choice, decision))
}

/// The plan of `delete` for `service`: one release of what it holds or serves.
pub(crate) fn plan_delete(
    service: &ServiceKey,
    published: Option<&LocalLoadBalancer>,
    allocator: &Allocator,
) -> Plan<LocalStep> {
    let held = allocator.held(service).map(|h| joined(&h.ips));
    Plan::now(
        held.or(published.map(LocalLoadBalancer::addresses))
            .map(|addresses| LocalStep::Release { addresses })
            .into_iter()
            .collect(),
    )
}

/// `ensure` of one Service.
pub(crate) struct EnsureFlow<'a> {
    provider: &'a LocalProvider,
    spec: &'a LoadBalancerSpec,
    /// What was served when last observed.
    pub(crate) current: Option<LocalLoadBalancer>,
    /// The decision of the last plan (what `finish` completes), and the choice it rests on.
    decided: Option<(Choice, Decision)>,
    /// What the allocate step served.
    allocated: Option<LocalLoadBalancer>,
    /// The last plan failed for the pool's reasons (not the API's): the shell drops addresses
    /// this Service lost to another.
    pub(crate) refused_by_pool: bool,
}

impl<'a> EnsureFlow<'a> {
    pub(crate) fn new(provider: &'a LocalProvider, spec: &'a LoadBalancerSpec) -> Self {
        EnsureFlow {
            provider,
            spec,
            current: None,
            decided: None,
            allocated: None,
            refused_by_pool: false,
        }
    }
}

#[async_trait]
impl Flow for EnsureFlow<'_> {
    type Step = LocalStep;
    type Done = LoadBalancerStatus;

    fn provider(&self) -> &'static str {
        PROVIDER_NAME
    }

    async fn plan(&mut self) -> Result<Plan<LocalStep>, ProviderError> {
        let provider = self.provider;
        let service = &self.spec.service;
        self.current = provider
            .api
            .call(FAMILY, "get", CallKind::Read, || async {
                Ok(provider.current(service))
            })
            .await?;
        let planned = provider.with_allocator(|a| {
            plan_ensure(self.spec, self.current.as_ref(), a)
                .map_err(|e| alloc_error(e, !a.pools().is_empty()))
        });
        self.refused_by_pool = planned.is_err();
        let (plan, choice, decision) = planned?;
        self.decided = Some((choice, decision));
        Ok(plan)
    }

    async fn run(&mut self, step: &LocalStep) -> Result<(), ProviderError> {
        let LocalStep::Allocate { .. } = step else {
            return Err(internal("ensure planned a release"));
        };
        let provider = self.provider;
        let spec = self.spec;
        let current = self.current.clone();
        let lb = provider
            .api
            .call(FAMILY, ALLOCATE, CallKind::Mutate, || async {
                // Planned again under the lock that commits: a concurrent ensure of another
                // Service may have taken the planned address since.
                let req = Request::from_spec(spec);
                let (lb, unblocked) = provider.with_allocator(|a| {
                    let (choice, decision) = step_for(spec, &req, current.as_ref(), a)
                        .map_err(|e| alloc_error(e, !a.pools().is_empty()))?;
                    let lb = match decision {
                        Decision::InSync(lb) | Decision::Republish(lb) | Decision::Allocate(lb) => {
                            lb
                        }
                    };
                    Ok::<_, ProviderError>((lb, a.commit(&req, &choice)))
                })?;
                provider.publish(&spec.service, Some(lb.clone()));
                if unblocked {
                    provider.bump();
                }
                Ok(lb)
            })
            .await?;
        tracing::info!(
            service = %spec.service,
            provider = PROVIDER_NAME,
            lb = %lb.addresses(),
            pool = lb.pool.as_deref().unwrap_or_default(),
            "local load balancer ensured"
        );
        self.allocated = Some(lb);
        Ok(())
    }

    async fn finish(&mut self) -> Result<LoadBalancerStatus, ProviderError> {
        let provider = self.provider;
        let lb = match (self.allocated.take(), self.decided.take()) {
            (Some(lb), _) => lb,
            // Also here: an ensure that gave up waiting left the address published, and its
            // retry finds it in sync.
            (None, Some((_, Decision::InSync(lb)))) => lb,
            (None, Some((choice, Decision::Republish(lb)))) => {
                // Adopted from the Service's status (at start-up, or as shown): the addresses
                // are the Service's already, so a restart's first pass changes nothing and
                // only rebuilds the in-process table the dataplane serves from. Claimed by
                // this Service, they cannot have been taken meanwhile.
                let req = Request::from_spec(self.spec);
                if provider.with_allocator(|a| a.commit(&req, &choice)) {
                    provider.bump();
                }
                provider.publish(&self.spec.service, Some(lb.clone()));
                lb
            }
            (None, _) => return Err(internal("ensure finished without a decision")),
        };
        provider.until_served(&lb).await?;
        Ok(lb.status())
    }
}

/// `delete` of one Service.
pub(crate) struct DeleteFlow<'a> {
    provider: &'a LocalProvider,
    service: &'a ServiceKey,
}

impl<'a> DeleteFlow<'a> {
    pub(crate) fn new(provider: &'a LocalProvider, service: &'a ServiceKey) -> Self {
        DeleteFlow { provider, service }
    }
}

#[async_trait]
impl Flow for DeleteFlow<'_> {
    type Step = LocalStep;
    type Done = ();

    fn provider(&self) -> &'static str {
        PROVIDER_NAME
    }

    async fn plan(&mut self) -> Result<Plan<LocalStep>, ProviderError> {
        let provider = self.provider;
        let service = self.service;
        provider
            .api
            .call(FAMILY, "get", CallKind::Read, || async {
                let published = provider.current(service);
                Ok(provider.with_allocator(|a| plan_delete(service, published.as_ref(), a)))
            })
            .await
    }

    async fn run(&mut self, step: &LocalStep) -> Result<(), ProviderError> {
        let LocalStep::Release { .. } = step else {
            return Err(internal("delete planned an allocation"));
        };
        let provider = self.provider;
        let service = self.service;
        provider
            .api
            .call(FAMILY, RELEASE, CallKind::Mutate, || async {
                let released = provider.with_allocator(|a| a.release(service));
                provider.publish(service, None);
                if let Some(ips) = released {
                    tracing::info!(service = %service, provider = PROVIDER_NAME, lb = %joined(&ips), "local load balancer released");
                    provider.bump();
                }
                Ok(())
            })
            .await
    }

    async fn finish(&mut self) -> Result<(), ProviderError> {
        Ok(())
    }
}

fn internal(message: &str) -> ProviderError {
    ProviderError::Internal {
        message: format!("local provider: {message}"),
        source: None,
    }
}

#[cfg(test)]
mod plan_equals_apply {
    //! Seeded scenarios: random Service edits, requested addresses (free, taken, outside the
    //! pool), source ranges, deletes and restarts (a fresh provider adopting what the Services
    //! show); before every `ensure`/`delete` the plan is rendered and must equal the mutating
    //! pool operations that follow, and planning itself must mutate nothing.
    //! `KUBE_LB_PLAN_SEED` replays one seed; `KUBE_LB_PLAN_SCENARIOS` sets the count.
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;
    use std::net::IpAddr;

    use kube_lb_annotations::{
        Cloud, PortSpec, Protocol, ProviderSpec, Scheme, ServiceKey, SessionAffinity,
        SourceRangeOrigin, SourceRanges, TargetPort, TrafficPolicy,
    };
    use kube_lb_provider_core::{CallCounter, LoadBalancerProvider, LoadBalancerStatus};

    use super::*;
    use crate::Pool;

    /// xorshift64*: small, seedable, good enough to pick edits.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn spec(name: &str, rng: &mut Rng) -> LoadBalancerSpec {
        let ports = [80u16, 443, 8080];
        let count = 1 + rng.below(2) as usize;
        let ports = (0..count)
            .map(|i| PortSpec {
                name: Some(format!("p{i}")),
                protocol: if rng.below(4) == 0 {
                    Protocol::Udp
                } else {
                    Protocol::Tcp
                },
                port: ports[(rng.below(3) as usize + i) % 3],
                node_port: Some(30000 + i as u16),
                target_port: TargetPort::Number(8080),
            })
            .collect();
        let requested_ip: Option<IpAddr> = match rng.below(5) {
            0 => Some(format!("127.0.0.{}", 10 + rng.below(6)).parse().unwrap()),
            1 => Some("127.0.1.1".parse().unwrap()),
            _ => None,
        };
        let cidrs = match rng.below(3) {
            0 => vec!["10.0.0.0/8".parse().unwrap()],
            _ => vec![],
        };
        LoadBalancerSpec {
            service: ServiceKey {
                namespace: "default".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            cloud: Cloud::Local,
            ports,
            scheme: Scheme::External,
            requested_ip,
            source_ranges: SourceRanges {
                cidrs,
                origin: SourceRangeOrigin::Default,
            },
            traffic_policy: TrafficPolicy::Cluster,
            session_affinity: SessionAffinity::None,
            load_balancer_class: None,
            allocate_node_ports: true,
            external_ips: vec![],
            topology_keys: vec![],
            extra_tags: BTreeMap::new(),
            provider: ProviderSpec::Local(Default::default()),
        }
    }

    /// The mutating operations since `before`, one entry per call.
    fn mutated(counter: &CallCounter, before: &kube_lb_provider_core::CallSnapshot) -> Vec<String> {
        let mut calls = Vec::new();
        for (record, count) in counter.snapshot().since(before).iter() {
            if record.kind == CallKind::Mutate {
                calls.extend((0..count).map(|_| record.operation.to_string()));
            }
        }
        calls
    }

    fn fresh(counter: &CallCounter) -> LocalProvider {
        LocalProvider::new(
            Pool::new(vec!["127.0.0.10-127.0.0.15".parse().unwrap()]).unwrap(),
            counter.clone(),
        )
    }

    async fn scenario(seed: u64) {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let counter = CallCounter::new();
        let mut provider = fresh(&counter);
        let names = ["a", "b", "c", "d"];
        let mut shown: BTreeMap<String, LoadBalancerStatus> = BTreeMap::new();
        for turn in 0..12 {
            let name = names[rng.below(4) as usize];
            let spec = spec(name, &mut rng);
            let op = rng.below(10);
            if op == 0 {
                // A restart: a new process adopts what the Services show.
                provider = fresh(&counter);
                for (name, status) in &shown {
                    let key = ServiceKey {
                        namespace: "default".into(),
                        name: name.clone(),
                        uid: format!("uid-{name}"),
                    };
                    provider.adopt(&key, status).await.unwrap();
                }
                continue;
            }
            let before = counter.snapshot();
            let deleting = op <= 2;
            let planned = if deleting {
                provider.plan_delete(&spec.service).await
            } else {
                provider.plan_ensure(&spec, &[]).await
            };
            assert!(
                mutated(&counter, &before).is_empty(),
                "seed {seed} turn {turn}: planning mutated"
            );
            let before = counter.snapshot();
            let applied = if deleting {
                provider.delete(&spec.service).await.map(|()| None)
            } else {
                provider.ensure(&spec, &[]).await.map(Some)
            };
            let calls = mutated(&counter, &before);
            match (&planned, &applied) {
                (Ok(plan), Ok(_)) => {
                    let want: Vec<String> = plan.iter().map(|c| c.call.clone()).collect();
                    assert_eq!(
                        want, calls,
                        "seed {seed} turn {turn} ({name}, delete: {deleting}): plan {plan:?}"
                    );
                }
                (Err(p), Err(a)) => {
                    assert_eq!(p.class(), a.class(), "seed {seed} turn {turn}: {p} vs {a}");
                    assert!(
                        calls.is_empty(),
                        "seed {seed} turn {turn}: refused but {calls:?}"
                    );
                }
                (p, a) => panic!("seed {seed} turn {turn}: plan {p:?} but apply {a:?}"),
            }
            match applied {
                Ok(Some(status)) => {
                    shown.insert(name.to_string(), status);
                }
                Ok(None) => {
                    shown.remove(name);
                }
                Err(_) => {}
            }
        }
    }

    #[tokio::test]
    async fn plan_equals_apply_over_seeded_scenarios() {
        if let Some(seed) = std::env::var("KUBE_LB_PLAN_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            scenario(seed).await;
            return;
        }
        let short = std::env::var("CI").is_ok_and(|v| v == "true");
        let count: u64 = std::env::var("KUBE_LB_PLAN_SCENARIOS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(if short { 60 } else { 200 });
        for seed in 0..count {
            scenario(seed).await;
        }
    }
}
