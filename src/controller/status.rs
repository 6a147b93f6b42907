//! Translating provider status into `.status.loadBalancer`, and that plus the
//! `kube-lb.io/LoadBalancerReady` condition into the one status patch a reconcile writes, or
//! none when the Service shows both already.

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use k8s_openapi::jiff::Timestamp;
use kube_lb_provider_core::LoadBalancerStatus;
use serde_json::{Value, json};

use super::conditions::{self, Readiness};

/// The ingress entries for `status`, in the provider's order.
pub fn ingress(status: &LoadBalancerStatus) -> Vec<LoadBalancerIngress> {
    status
        .ingress
        .iter()
        .map(|i| LoadBalancerIngress {
            ip: i.ip.map(|ip| ip.to_string()),
            hostname: i.hostname.clone(),
            // Only with an IP: the API server refuses ipMode without one.
            ip_mode: i
                .ip_mode
                .filter(|_| i.ip.is_some())
                .map(|mode| mode.as_str().to_string()),
            ..Default::default()
        })
        .collect()
}

/// The addresses `ingress` shows, IP or else hostname, as the condition and events name them.
pub fn addresses(ingress: &[LoadBalancerIngress]) -> Vec<String> {
    ingress
        .iter()
        .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
        .collect()
}

/// The metadata merge patch that sets the annotations the provider asked to write back
/// (`wanted`) where the Service does not show them with the same value yet, and removes the
/// `stale` ones it still shows; `None` when nothing differs. Guarded by the Service's uid, so
/// a Service deleted and re-created meanwhile is not written.
pub fn annotation_patch(
    service: &Service,
    wanted: &std::collections::BTreeMap<String, String>,
    stale: &std::collections::BTreeSet<String>,
) -> Option<Value> {
    let shown = service.metadata.annotations.as_ref();
    let missing = wanted
        .iter()
        .filter(|(key, value)| shown.and_then(|a| a.get(*key)) != Some(*value))
        .map(|(key, value)| (key.clone(), Value::String(value.clone())));
    let removed = stale
        .iter()
        .filter(|key| !wanted.contains_key(*key) && shown.is_some_and(|a| a.contains_key(*key)))
        .map(|key| (key.clone(), Value::Null));
    let changes: serde_json::Map<String, Value> = missing.chain(removed).collect();
    if changes.is_empty() {
        return None;
    }
    Some(json!({"metadata": {"uid": service.metadata.uid, "annotations": changes}}))
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
                ip_mode: match i.ip_mode.as_deref() {
                    Some("Proxy") => Some(kube_lb_provider_core::IpMode::Proxy),
                    Some("VIP") => Some(kube_lb_provider_core::IpMode::Vip),
                    _ => None,
                },
            })
            .filter(|i| i.ip.is_some() || i.hostname.is_some())
            .collect(),
        ..Default::default()
    }
}

/// True when the Service already shows exactly `desired` as its ingress.
pub fn ingress_shown(service: &Service, desired: &[LoadBalancerIngress]) -> bool {
    current_ingress(service)
        .iter()
        .map(shown_as)
        .eq(desired.iter().map(shown_as))
}

/// An ingress entry as compared: an IP without ipMode is VIP, as kube-apiserver defaults it
/// (and as an API server without the field shows it), so neither side's spelling causes a
/// write on every resync.
fn shown_as(i: &LoadBalancerIngress) -> (Option<&str>, Option<&str>, Option<&str>) {
    let mode = match (i.ip.as_deref(), i.ip_mode.as_deref()) {
        (Some(_), None) => Some("VIP"),
        (_, mode) => mode,
    };
    (i.ip.as_deref(), i.hostname.as_deref(), mode)
}

/// What a status write does with the `kube-lb.io/LoadBalancerReady` condition.
#[derive(Debug, Clone, Copy)]
pub enum ConditionChange<'a> {
    /// Leave it as it is.
    Keep,
    /// Show this (a no-op when it is shown already).
    Set(&'a Readiness),
    /// Remove it: the Service stopped being ours (a no-op when it is absent).
    Remove,
}

/// A strategic merge patch for the `/status` subresource that sets the ingress (when `ingress`
/// is given) and the condition in one write, or `None` when the Service already shows both
/// (a no-op resync writes nothing).
///
/// Strategic, not JSON merge: `status.conditions` merges by `type`, so the patch carries only
/// kube-lb's condition and never drops one another controller wrote meanwhile; the ingress
/// list is atomic and replaced whole (`null` removes it).
pub fn patch_for(
    service: &Service,
    ingress: Option<&[LoadBalancerIngress]>,
    condition: ConditionChange<'_>,
    now: Timestamp,
) -> Option<Value> {
    let mut status = serde_json::Map::new();
    if let Some(desired) = ingress
        && !ingress_shown(service, desired)
    {
        let ingress: Value = if desired.is_empty() {
            Value::Null
        } else {
            json!(desired)
        };
        status.insert("loadBalancer".into(), json!({ "ingress": ingress }));
    }
    let shown = conditions::current(service);
    let generation = service.metadata.generation;
    match condition {
        ConditionChange::Keep => {}
        ConditionChange::Set(readiness) if readiness.is_shown_by(shown, generation) => {}
        ConditionChange::Set(readiness) => {
            let condition = readiness.to_condition(shown, generation, now);
            status.insert("conditions".into(), json!([condition]));
        }
        ConditionChange::Remove if shown.is_none() => {}
        ConditionChange::Remove => {
            status.insert(
                "conditions".into(),
                json!([{ "type": conditions::CONDITION_TYPE, "$patch": "delete" }]),
            );
        }
    }
    (!status.is_empty()).then(|| json!({ "status": status }))
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
                ip_mode: None,
            }],
            ..Default::default()
        }
    }

    fn t(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn ingress_patch(svc: &Service, desired: &[LoadBalancerIngress]) -> Option<Value> {
        patch_for(svc, Some(desired), ConditionChange::Keep, t(0))
    }

    #[test]
    fn annotation_patch_sets_only_what_differs() {
        let map = |pairs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let service_with = |annotations: Option<&[(&str, &str)]>| {
            let mut service = Service::default();
            service.metadata.uid = Some("u1".into());
            service.metadata.annotations = annotations.map(map);
            service
        };
        let set = |keys: &[&str]| -> std::collections::BTreeSet<String> {
            keys.iter().map(|k| k.to_string()).collect()
        };
        let shown: &[(&str, &str)] = &[("a", "1"), ("b", "old")];
        let cases = [
            ("nothing asked", Some(shown), map(&[]), set(&[]), None),
            (
                "already shown",
                Some(shown),
                map(&[("a", "1")]),
                set(&[]),
                None,
            ),
            (
                "changed and new; the shown one left out",
                Some(shown),
                map(&[("a", "1"), ("b", "new"), ("c", "3")]),
                set(&[]),
                Some(json!({"metadata": {"uid": "u1", "annotations": {"b": "new", "c": "3"}}})),
            ),
            (
                "Service without annotations",
                None,
                map(&[("a", "1")]),
                set(&["b"]),
                Some(json!({"metadata": {"uid": "u1", "annotations": {"a": "1"}}})),
            ),
            (
                "a stale key shown is removed, one not shown is not mentioned",
                Some(shown),
                map(&[]),
                set(&["b", "z"]),
                Some(json!({"metadata": {"uid": "u1", "annotations": {"b": null}}})),
            ),
            (
                "a key both wanted and stale is written",
                Some(shown),
                map(&[("b", "new")]),
                set(&["b"]),
                Some(json!({"metadata": {"uid": "u1", "annotations": {"b": "new"}}})),
            ),
        ];
        for (case, annotations, wanted, stale, want) in cases {
            let service = service_with(annotations);
            assert_eq!(annotation_patch(&service, &wanted, &stale), want, "{case}");
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
                ingress_patch(&svc, &desired).is_some(),
                want,
                "{:?} -> {desired:?}",
                current_ingress(&svc)
            );
            assert_eq!(ingress_shown(&svc, &desired), !want);
        }
        let clear = ingress_patch(&svc_with(&["127.240.0.1"]), &[]).unwrap();
        assert_eq!(
            clear,
            json!({"status": {"loadBalancer": {"ingress": null}}})
        );
        let set = ingress_patch(&Service::default(), &host).unwrap();
        assert_eq!(
            set,
            json!({"status": {"loadBalancer": {"ingress": [{"hostname": "a1.elb.amazonaws.com"}]}}})
        );
    }

    /// ipMode: `Proxy` is written and compared; an IP without ipMode is VIP on either side (as
    /// kube-apiserver defaults it), so a server that shows `VIP` causes no write, and neither
    /// does one that drops the field.
    #[test]
    fn ip_mode_is_written_and_vip_equals_unset() {
        let proxied = ingress(&LoadBalancerStatus {
            ingress: vec![Ing {
                ip: Some("203.0.113.5".parse().unwrap()),
                ip_mode: Some(kube_lb_provider_core::IpMode::Proxy),
                ..Ing::default()
            }],
            ..Default::default()
        });
        assert_eq!(proxied[0].ip_mode.as_deref(), Some("Proxy"));
        let plain = ingress(&status(Some("203.0.113.5"), None));
        assert_eq!(plain[0].ip_mode, None, "unset, not spelled out");
        let shown = |mode: Option<&str>| {
            let mut svc = svc_with(&["203.0.113.5"]);
            let status = svc.status.as_mut().unwrap().load_balancer.as_mut().unwrap();
            status.ingress.as_mut().unwrap()[0].ip_mode = mode.map(String::from);
            svc
        };
        assert!(ingress_shown(&shown(Some("VIP")), &plain));
        assert!(ingress_shown(&shown(None), &plain));
        assert!(
            !ingress_shown(&shown(Some("VIP")), &proxied),
            "VIP -> Proxy is a change"
        );
        assert!(ingress_shown(&shown(Some("Proxy")), &proxied));
        let hostname_only = ingress(&LoadBalancerStatus {
            ingress: vec![Ing {
                hostname: Some("lb.example".into()),
                ip_mode: Some(kube_lb_provider_core::IpMode::Proxy),
                ..Ing::default()
            }],
            ..Default::default()
        });
        assert_eq!(hostname_only[0].ip_mode, None, "never without an IP");
    }

    /// The ingress and the condition go out in one patch; what is shown already is left out;
    /// a Service that shows both gets no patch at all.
    #[test]
    fn ingress_and_condition_share_one_patch() {
        let ip = ingress(&status(Some("127.240.0.1"), None));
        let ready = Readiness::provisioned(&["127.240.0.1".into()]);
        let fresh = svc_with(&[]);
        let patch = patch_for(&fresh, Some(&ip), ConditionChange::Set(&ready), t(100)).unwrap();
        assert_eq!(
            patch,
            json!({"status": {
                "loadBalancer": {"ingress": [{"ip": "127.240.0.1"}]},
                "conditions": [{
                    "type": "kube-lb.io/LoadBalancerReady",
                    "status": "True",
                    "reason": "Provisioned",
                    "message": "Load balancer ready at 127.240.0.1.",
                    "lastTransitionTime": "1970-01-01T00:01:40Z"
                }]
            }})
        );
        // Apply it: the Service now shows both, and the same reconcile writes nothing.
        let mut shown = svc_with(&["127.240.0.1"]);
        shown.status.as_mut().unwrap().conditions =
            Some(vec![ready.to_condition(None, None, t(100))]);
        assert_eq!(
            patch_for(&shown, Some(&ip), ConditionChange::Set(&ready), t(200)),
            None
        );
        // Only the condition changed: only the condition is written, transition time kept
        // while the status stays True.
        let with_note = ready.clone().with_ignored(&["x: ignored".into()]);
        let patch = patch_for(&shown, Some(&ip), ConditionChange::Set(&with_note), t(200)).unwrap();
        assert!(patch["status"].get("loadBalancer").is_none(), "{patch}");
        assert_eq!(
            patch["status"]["conditions"][0]["lastTransitionTime"],
            "1970-01-01T00:01:40Z"
        );
        // Removal: a delete directive for kube-lb's type only, with the ingress cleared.
        let patch = patch_for(&shown, Some(&[]), ConditionChange::Remove, t(300)).unwrap();
        assert_eq!(
            patch,
            json!({"status": {
                "loadBalancer": {"ingress": null},
                "conditions": [{"type": "kube-lb.io/LoadBalancerReady", "$patch": "delete"}]
            }})
        );
        assert_eq!(
            patch_for(&fresh, Some(&[]), ConditionChange::Remove, t(300)),
            None,
            "nothing to remove"
        );
        // observedGeneration follows metadata.generation when the API server sets it.
        let mut generated = fresh.clone();
        generated.metadata.generation = Some(7);
        let patch = patch_for(&generated, None, ConditionChange::Set(&ready), t(1)).unwrap();
        assert_eq!(patch["status"]["conditions"][0]["observedGeneration"], 7);
    }

    #[test]
    fn recorded_status_round_trips() {
        let svc = svc_with(&["127.240.0.9"]);
        assert_eq!(recorded_status(&svc), status(Some("127.240.0.9"), None));
        assert_eq!(external_ip_column(&current_ingress(&svc)), "127.240.0.9");
        assert_eq!(external_ip_column(&[]), "<pending>");
    }
}
