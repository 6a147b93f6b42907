//! `kube-lb up`'s hand-off between the `local` provider and the dataplane, both in this process:
//! the dataplane forwards an address as soon as the provider assigns it, and the provider
//! reports the address (which the controller writes into the Service's status) only once the
//! dataplane's rules forward it. Without it, a client that waited for the status and connected
//! at once was refused until the dataplane's next sync, up to a second later.
//!
//! "Forward" means to an endpoint: a Service is often created just before its EndpointSlice,
//! and under load the dataplane may program its address before it has seen the slice, which
//! refuses connections as kube-proxy refuses a Service without endpoints. So the address is
//! reported once it is programmed with endpoints, or, for a Service that has none, once it has
//! been programmed for [`ENDPOINT_GRACE`] without any appearing.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use kube_lb_annotations::Protocol;
use kube_lb_dataplane::model::{Protocol as DataplaneProtocol, ServiceKey};
use kube_lb_dataplane::watch::{AssignedIngress, Handoff, ServedFrontends};
use kube_lb_provider_local::{LocalLoadBalancer, LocalLoadBalancers, LocalProvider};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long `ensure` waits for the rules before it fails as pending (and is retried).
const SERVE_WAIT: Duration = Duration::from_secs(10);

/// How long a programmed address waits for endpoints before it is reported without them (a
/// Service whose pods are not there yet still gets its address, as on a cluster).
pub const ENDPOINT_GRACE: Duration = Duration::from_secs(3);

/// Connects `local` to a dataplane: returns the dataplane's side of the hand-off and the task
/// that passes the provider's assignments on until `shutdown`.
pub fn connect(
    local: &LocalProvider,
    shutdown: CancellationToken,
) -> (Handoff, tokio::task::JoinHandle<()>) {
    let (assigned_tx, assigned) = watch::channel(AssignedIngress::new());
    let (served, served_rx) = watch::channel(ServedFrontends::new());
    let (forwarded, forwarded_rx) = watch::channel(ServedFrontends::new());
    local.gate_on_served(Arc::new(move |lb| {
        let served = served_rx.clone();
        let forwarded = forwarded_rx.clone();
        Box::pin(until_served(served, forwarded, lb))
    }));
    let mut published = local.subscribe();
    let forward = tokio::spawn(async move {
        loop {
            assigned_tx.send_replace(assignments(&published.borrow_and_update()));
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = published.changed() => if changed.is_err() { return },
            }
        }
    });
    (
        Handoff {
            assigned,
            served,
            forwarded,
        },
        forward,
    )
}

/// The provider's table as the dataplane's index takes it.
fn assignments(published: &LocalLoadBalancers) -> AssignedIngress {
    published
        .iter()
        .map(|(service, lb)| {
            (
                ServiceKey::new(&service.namespace, &service.name),
                lb.ips.clone(),
            )
        })
        .collect()
}

/// Every (address, port, protocol) `lb` must be forwarded on.
fn frontends(lb: &LocalLoadBalancer) -> Vec<(IpAddr, u16, DataplaneProtocol)> {
    lb.ips
        .iter()
        .flat_map(|ip| {
            lb.ports.iter().map(move |port| {
                let protocol = match port.protocol {
                    Protocol::Tcp => DataplaneProtocol::Tcp,
                    Protocol::Udp => DataplaneProtocol::Udp,
                    Protocol::Sctp => DataplaneProtocol::Sctp,
                };
                (*ip, port.port, protocol)
            })
        })
        .collect()
}

/// Waits until the dataplane's last sync forwards every frontend of `lb` to endpoints, or has
/// served them all for [`ENDPOINT_GRACE`] without endpoints.
async fn until_served(
    mut served: watch::Receiver<ServedFrontends>,
    mut forwarded: watch::Receiver<ServedFrontends>,
    lb: LocalLoadBalancer,
) -> Result<(), String> {
    let wanted = frontends(&lb);
    let all_in = |set: &ServedFrontends| wanted.iter().all(|frontend| set.contains(frontend));
    let waited = tokio::time::timeout(SERVE_WAIT, async {
        // Programmed at all first: only then does the grace for endpoints start.
        served.wait_for(|s| all_in(s)).await.map(drop)?;
        match tokio::time::timeout(ENDPOINT_GRACE, forwarded.wait_for(|f| all_in(f))).await {
            Ok(result) => result.map(drop),
            // No endpoints within the grace: the address is reported all the same.
            Err(_) => Ok(()),
        }
    })
    .await;
    match waited {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err("the dataplane has stopped".to_string()),
        Err(_) => {
            let missing: Vec<String> = {
                let served = served.borrow();
                wanted
                    .iter()
                    .filter(|frontend| !served.contains(*frontend))
                    .map(|(ip, port, protocol)| {
                        format!("{}/{protocol:?}", std::net::SocketAddr::new(*ip, *port))
                    })
                    .collect()
            };
            Err(format!(
                "the dataplane does not forward {} yet (waited {}s)",
                missing.join(", "),
                SERVE_WAIT.as_secs()
            ))
        }
    }
}
