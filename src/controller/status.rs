//! Translating provider status into `.status.loadBalancer` and deciding whether a patch is
//! needed.

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use kube_lb_provider_core::LoadBalancerStatus;
use serde_json::{Value, json};

/// The ingress entries for `status`, in the provider's order.
pub fn ingress(status: &LoadBalancerStatus) -> Vec<LoadBalancerIngress> {
    status
        .ingress
        .iter()
        .map(|i| LoadBalancerIngress {
            ip: i.ip.map(|ip| ip.to_string()),
            hostname: i.hostname.clone(),
            ..Default::default()
        })
        .collect()
}

/// The ingress currently written on the Service (empty when none).
pub fn current_ingress(service: &Service) -> Vec<LoadBalancerIngress> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.clone())
        .unwrap_or_default()
}

/// The provider status recorded on the Service, for re-adoption after a restart.
pub fn recorded_status(service: &Service) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: current_ingress(service)
            .into_iter()
            .map(|i| kube_lb_provider_core::LoadBalancerIngress {
                ip: i.ip.and_then(|ip| ip.parse().ok()),
                hostname: i.hostname,
            })
            .filter(|i| i.ip.is_some() || i.hostname.is_some())
            .collect(),
    }
}

/// A merge patch for the `/status` subresource setting the ingress, or `None` when the
/// Service already shows exactly that (a no-op resync writes nothing).
pub fn patch_for(service: &Service, desired: &[LoadBalancerIngress]) -> Option<Value> {
    let same = current_ingress(service)
        .iter()
        .map(|i| (i.ip.as_deref(), i.hostname.as_deref()))
        .eq(desired
            .iter()
            .map(|i| (i.ip.as_deref(), i.hostname.as_deref())));
    if same {
        return None;
    }
    let ingress: Value = if desired.is_empty() {
        // Merge patch: null removes the field.
        Value::Null
    } else {
        json!(desired)
    };
    Some(json!({ "status": { "loadBalancer": { "ingress": ingress } } }))
}

/// The addresses as `kubectl get svc` shows them in EXTERNAL-IP.
pub fn external_ip_column(ingress: &[LoadBalancerIngress]) -> String {
    let parts: Vec<&str> = ingress
        .iter()
        .filter_map(|i| i.ip.as_deref().or(i.hostname.as_deref()))
        .collect();
    if parts.is_empty() {
        "<pending>".to_string()
    } else {
        parts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{LoadBalancerStatus as K8sLb, ServiceStatus};
    use kube_lb_provider_core::LoadBalancerIngress as Ing;

    use super::*;

    fn svc_with(ips: &[&str]) -> Service {
        Service {
            status: Some(ServiceStatus {
                load_balancer: Some(K8sLb {
                    ingress: Some(
                        ips.iter()
                            .map(|ip| LoadBalancerIngress {
                                ip: Some((*ip).into()),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn status(ip: Option<&str>, host: Option<&str>) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: vec![Ing {
                ip: ip.map(|i| i.parse().unwrap()),
                hostname: host.map(String::from),
            }],
        }
    }

    #[test]
    fn patches_only_on_change() {
        let ip = ingress(&status(Some("127.240.0.1"), None));
        let host = ingress(&status(None, Some("a1.elb.amazonaws.com")));
        let cases = [
            (svc_with(&[]), ip.clone(), true),
            (svc_with(&["127.240.0.1"]), ip.clone(), false),
            (svc_with(&["127.240.0.2"]), ip.clone(), true),
            (svc_with(&["127.240.0.1"]), host.clone(), true),
            (svc_with(&["127.240.0.1"]), vec![], true),
            (svc_with(&[]), vec![], false),
            (Service::default(), vec![], false),
        ];
        for (svc, desired, want) in cases {
            assert_eq!(
                patch_for(&svc, &desired).is_some(),
                want,
                "{:?} -> {desired:?}",
                current_ingress(&svc)
            );
        }
        let clear = patch_for(&svc_with(&["127.240.0.1"]), &[]).unwrap();
        assert_eq!(
            clear,
            json!({"status": {"loadBalancer": {"ingress": null}}})
        );
        let set = patch_for(&Service::default(), &host).unwrap();
        assert_eq!(
            set,
            json!({"status": {"loadBalancer": {"ingress": [{"hostname": "a1.elb.amazonaws.com"}]}}})
        );
    }

    #[test]
    fn recorded_status_round_trips() {
        let svc = svc_with(&["127.240.0.9"]);
        assert_eq!(recorded_status(&svc), status(Some("127.240.0.9"), None));
        assert_eq!(external_ip_column(&current_ingress(&svc)), "127.240.0.9");
        assert_eq!(external_ip_column(&[]), "<pending>");
    }
}
