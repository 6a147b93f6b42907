//! A small TCP forwarder for `kube-lb up`: listens on every local load-balancer address and
//! port and forwards each connection to one of the Service's ready endpoints, round robin.
//! The full dataplane (`dataplane/`) replaces it; it is kept deliberately small.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use ipnet::IpNet;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use kube_lb_annotations::{Protocol, ServiceKey};
use kube_lb_provider_local::LocalLoadBalancers;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::controller::nodes::SERVICE_NAME_LABEL;

/// What one listener forwards to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The Service.
    pub namespace: String,
    /// The Service name.
    pub name: String,
    /// The Service port name, matching the EndpointSlice port name.
    pub port_name: Option<String>,
    /// Allowed client ranges (empty allows all).
    pub source_ranges: Vec<IpNet>,
}

/// The listeners the load balancers call for. Only TCP ports are served; others are skipped
/// (the full dataplane handles UDP and SCTP).
pub fn desired_listeners(lbs: &LocalLoadBalancers) -> BTreeMap<SocketAddr, Target> {
    let mut out = BTreeMap::new();
    for (service, lb) in lbs {
        for port in lb.ports.iter().filter(|p| p.protocol == Protocol::Tcp) {
            out.insert(
                SocketAddr::new(lb.ip, port.port),
                target(service, port.name.clone(), &lb.source_ranges),
            );
        }
    }
    out
}

fn target(service: &ServiceKey, port_name: Option<String>, source_ranges: &[IpNet]) -> Target {
    Target {
        namespace: service.namespace.clone(),
        name: service.name.clone(),
        port_name,
        source_ranges: source_ranges.to_vec(),
    }
}

/// Ready endpoint addresses of `target`'s port, in a stable order.
pub fn ready_endpoints<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    target: &Target,
) -> Vec<SocketAddr> {
    let wanted = target.port_name.as_deref().unwrap_or("");
    let mut out: Vec<SocketAddr> = slices
        .into_iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(target.namespace.as_str()))
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
                == Some(&target.name)
        })
        .flat_map(|slice| {
            let port = slice
                .ports
                .as_deref()
                .unwrap_or_default()
                .iter()
                .find(|p| p.name.as_deref().unwrap_or("") == wanted)
                .and_then(|p| p.port)
                .and_then(|p| u16::try_from(p).ok());
            slice
                .endpoints
                .iter()
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
                .flat_map(|e| e.addresses.iter())
                .filter_map(move |a| Some(SocketAddr::new(a.parse::<IpAddr>().ok()?, port?)))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// True when `client` may connect.
pub fn allowed(source_ranges: &[IpNet], client: IpAddr) -> bool {
    source_ranges.is_empty() || source_ranges.iter().any(|r| r.contains(&client))
}

/// Serves the load balancers published on `lbs` until `shutdown`, following EndpointSlices
/// through `client`.
pub async fn run(
    client: Client,
    mut lbs: watch::Receiver<LocalLoadBalancers>,
    shutdown: CancellationToken,
) {
    let (slices, writer) = reflector::store::<EndpointSlice>();
    let watch_slices = {
        let shutdown = shutdown.clone();
        let stream = watcher(
            Api::<EndpointSlice>::all(client),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(writer)
        .applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream.take_until(shutdown.cancelled_owned()));
            while stream.next().await.is_some() {}
        })
    };
    let mut running: HashMap<SocketAddr, (Target, JoinHandle<()>)> = HashMap::new();
    loop {
        let desired = desired_listeners(&lbs.borrow_and_update());
        running.retain(|addr, (target, task)| {
            let keep = desired.get(addr) == Some(target);
            if !keep {
                task.abort();
                tracing::info!(%addr, "stopped forwarding");
            }
            keep
        });
        for (addr, target) in desired {
            if running.contains_key(&addr) {
                continue;
            }
            let task = tokio::spawn(listen(addr, target.clone(), slices.clone()));
            running.insert(addr, (target, task));
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = lbs.changed() => if changed.is_err() { shutdown.cancelled().await; break },
        }
    }
    for (_, (_, task)) in running {
        task.abort();
    }
    watch_slices.abort();
}

async fn listen(addr: SocketAddr, target: Target, slices: Store<EndpointSlice>) {
    let listener = match TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%addr, service = %format!("{}/{}", target.namespace, target.name), %error, "cannot listen for load balancer");
            return;
        }
    };
    tracing::info!(%addr, service = %format!("{}/{}", target.namespace, target.name), "forwarding");
    let next = Arc::new(AtomicUsize::new(0));
    let target = Arc::new(target);
    loop {
        let Ok((client, peer)) = listener.accept().await else {
            continue;
        };
        if !allowed(&target.source_ranges, peer.ip()) {
            tracing::debug!(%peer, %addr, "client outside loadBalancerSourceRanges; closing");
            continue;
        }
        let endpoints = ready_endpoints(slices.state().iter().map(AsRef::as_ref), &target);
        if endpoints.is_empty() {
            tracing::warn!(%addr, "no ready endpoints; closing connection");
            continue;
        }
        let pick = endpoints[next.fetch_add(1, Ordering::Relaxed) % endpoints.len()];
        tokio::spawn(forward(client, pick));
    }
}

async fn forward(mut client: TcpStream, backend: SocketAddr) {
    let connect = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(backend)).await;
    let mut upstream = match connect {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::warn!(%backend, %error, "cannot reach endpoint");
            return;
        }
        Err(_) => {
            tracing::warn!(%backend, "timed out connecting to endpoint");
            return;
        }
    };
    if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        tracing::debug!(%backend, %error, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube_lb_provider_local::{LocalLoadBalancer, LocalPort};

    use super::*;

    fn key(name: &str) -> ServiceKey {
        ServiceKey {
            namespace: "default".into(),
            name: name.into(),
            uid: "u".into(),
        }
    }

    fn slice(
        service: &str,
        port: (&str, i32),
        endpoints: &[(&str, Option<bool>)],
    ) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(format!("{service}-abc")),
                namespace: Some("default".into()),
                labels: Some([(SERVICE_NAME_LABEL.to_string(), service.to_string())].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: endpoints
                .iter()
                .map(|(ip, ready)| Endpoint {
                    addresses: vec![(*ip).into()],
                    conditions: Some(EndpointConditions {
                        ready: *ready,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            ports: Some(vec![EndpointPort {
                name: Some(port.0.into()),
                port: Some(port.1),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
        }
    }

    #[test]
    fn listeners_cover_tcp_ports_only() {
        let lbs = LocalLoadBalancers::from([(
            key("web"),
            LocalLoadBalancer {
                ip: "127.240.0.1".parse().unwrap(),
                ports: vec![
                    LocalPort {
                        name: Some("http".into()),
                        protocol: Protocol::Tcp,
                        port: 8080,
                    },
                    LocalPort {
                        name: Some("dns".into()),
                        protocol: Protocol::Udp,
                        port: 53,
                    },
                ],
                source_ranges: vec![],
            },
        )]);
        let listeners = desired_listeners(&lbs);
        assert_eq!(listeners.len(), 1);
        let target = &listeners[&"127.240.0.1:8080".parse().unwrap()];
        assert_eq!(target.port_name.as_deref(), Some("http"));
    }

    #[test]
    fn endpoints_by_port_name_and_readiness() {
        let slices = [
            slice(
                "web",
                ("http", 8080),
                &[
                    ("127.0.0.3", Some(true)),
                    ("127.0.0.2", None),
                    ("127.0.0.4", Some(false)),
                ],
            ),
            slice("web", ("metrics", 9090), &[("127.0.0.5", Some(true))]),
            slice("other", ("http", 8080), &[("127.0.0.6", Some(true))]),
        ];
        let target = target(&key("web"), Some("http".into()), &[]);
        let got = ready_endpoints(&slices, &target);
        let want: Vec<SocketAddr> = vec![
            "127.0.0.2:8080".parse().unwrap(),
            "127.0.0.3:8080".parse().unwrap(),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn source_ranges() {
        let ranges: Vec<IpNet> = vec!["127.0.0.0/30".parse().unwrap()];
        let cases = [
            (&ranges[..], "127.0.0.1", true),
            (&ranges[..], "127.0.0.9", false),
            (&[][..], "10.0.0.1", true),
        ];
        for (r, ip, want) in cases {
            assert_eq!(allowed(r, ip.parse().unwrap()), want, "{ip}");
        }
    }
}
