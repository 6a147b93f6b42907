//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's timings and rules:
//! a candidate takes the lease only when the holder has not renewed it for a full lease
//! duration (measured on the candidate's own clock, so clock skew between replicas does not
//! matter), updates use optimistic concurrency (resourceVersion), and a leader that cannot
//! renew within the renew deadline stops acting before anyone else may take over.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Timings and identity of one candidate.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (pod name or hostname plus a random suffix).
    pub identity: String,
    /// How long a lease is valid after its last renewal (client-go default 15 s).
    pub lease_duration: Duration,
    /// How long a leader keeps acting while renewals fail (client-go default 10 s). Must be
    /// shorter than `lease_duration`, so the old leader stops before a new one can start.
    pub renew_deadline: Duration,
    /// Interval between attempts (client-go default 2 s).
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// client-go's defaults for the given lease and identity.
    pub fn new(namespace: &str, name: &str, identity: String) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// A sensible default identity: `$POD_NAME` or the host name, plus a random suffix so two
/// processes on one host are distinct.
pub fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "kube-lb".to_string());
    format!("{base}_{:08x}", rand::random::<u32>())
}

/// What the candidate last saw in the Lease, and when (on its own clock).
#[derive(Debug, Clone, PartialEq)]
struct Observation {
    holder: String,
    renew_time: Option<Timestamp>,
    transitions: i32,
}

/// Campaigns for a Lease and publishes whether this replica leads.
#[derive(Debug)]
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderConfig,
    observed: Option<(Observation, Instant)>,
}

/// The result of one attempt.
enum Attempt {
    Leading,
    Following,
}

impl LeaderElector {
    /// A candidate for `config.name` in `config.namespace`.
    pub fn new(client: kube::Client, config: LeaderConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    /// Campaigns until `shutdown`, then releases the lease if held. The receiver reads `true`
    /// exactly while this replica may act.
    pub fn spawn(
        mut self,
        shutdown: CancellationToken,
    ) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut last_renewal: Option<Instant> = None;
            loop {
                let leading = *tx.borrow();
                match self.try_acquire_or_renew().await {
                    Ok(Attempt::Leading) => {
                        last_renewal = Some(Instant::now());
                        if !leading {
                            tracing::info!(identity = %self.config.identity, lease = %self.config.name, "became leader");
                            tx.send_replace(true);
                        }
                    }
                    Ok(Attempt::Following) => {
                        if leading {
                            tracing::warn!(identity = %self.config.identity, "another replica holds the lease; stopping");
                            tx.send_replace(false);
                        }
                    }
                    Err(error) => {
                        tracing::warn!(identity = %self.config.identity, %error, "lease update failed");
                        let expired = last_renewal
                            .is_none_or(|at| at.elapsed() >= self.config.renew_deadline);
                        if leading && expired {
                            tracing::warn!(identity = %self.config.identity, "renew deadline passed; stopping");
                            tx.send_replace(false);
                        }
                    }
                }
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(self.config.retry_period) => {}
                }
            }
            let was_leading = tx.send_replace(false);
            if was_leading && let Err(error) = self.release().await {
                tracing::warn!(%error, "could not release the lease");
            }
        });
        (rx, task)
    }

    fn spec_for_us(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let ours = previous.and_then(|p| p.holder_identity.as_deref())
            == Some(self.config.identity.as_str());
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            acquire_time: if ours {
                previous.and_then(|p| p.acquire_time.clone())
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if ours || previous.is_none() {
                transitions
            } else {
                transitions + 1
            }),
            ..Default::default()
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let Some(lease) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec_for_us(None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Leading),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Following),
                Err(error) => Err(error),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let observation = Observation {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            transitions: spec.lease_transitions.unwrap_or(0),
        };
        let now = Instant::now();
        let observed_at = match &self.observed {
            Some((previous, at)) if *previous == observation => *at,
            _ => {
                self.observed = Some((observation.clone(), now));
                now
            }
        };
        let held_by_other =
            !observation.holder.is_empty() && observation.holder != self.config.identity;
        if held_by_other && now.duration_since(observed_at) < self.config.lease_duration {
            return Ok(Attempt::Following);
        }
        let updated = Lease {
            metadata: lease.metadata.clone(),
            spec: Some(self.spec_for_us(Some(&spec))),
        };
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => Ok(Attempt::Leading),
            // Someone else wrote first: they won this round.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Following),
            Err(error) => Err(error),
        }
    }

    async fn release(&self) -> Result<(), kube::Error> {
        let Some(lease) = self.api.get_opt(&self.config.name).await? else {
            return Ok(());
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        // As client-go does on release: an empty holder with a 1 s duration lets the next
        // candidate take over at its next attempt.
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        let released = Lease {
            metadata: lease.metadata,
            spec: Some(spec),
        };
        self.api
            .replace(&self.config.name, &PostParams::default(), &released)
            .await?;
        tracing::info!(identity = %self.config.identity, "released the lease");
        Ok(())
    }
}
