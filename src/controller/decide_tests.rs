//! Table tests of the reconcile's decisions: one row per case, each naming the effects in
//! the order the shell performs them and how the reconcile ends.

use k8s_openapi::api::core::v1::{LoadBalancerStatus as ServiceLbStatus, ServiceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

const SECOND: Duration = Duration::from_secs(1);

fn timing() -> Timing {
    Timing {
        backoff_base: Duration::from_secs(5),
        backoff_max: Duration::from_secs(300),
        resync: Duration::from_secs(600),
    }
}

/// The provider's answer with this one IP.
fn answer(address: Option<&str>) -> kube_lb_provider_core::LoadBalancerStatus {
    kube_lb_provider_core::LoadBalancerStatus::with_ingress(
        address
            .map(|a| kube_lb_provider_core::LoadBalancerIngress {
                ip: Some(a.parse().expect("an IP")),
                hostname: None,
                ip_mode: None,
            })
            .into_iter()
            .collect(),
    )
}

fn ip(address: &str) -> Vec<LoadBalancerIngress> {
    vec![LoadBalancerIngress {
        ip: Some(address.into()),
        ..Default::default()
    }]
}

/// A Service at resourceVersion `rv` showing `ingress`.
fn service(rv: &str, ingress: Option<Vec<LoadBalancerIngress>>) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        },
        status: ingress.map(|ingress| ServiceStatus {
            load_balancer: Some(ServiceLbStatus {
                ingress: Some(ingress),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// How a plan ends, comparable.
fn end(next: &Next) -> String {
    match next {
        Next::Call => "call".into(),
        Next::Return(action) => format!("return {action:?}"),
        Next::Fail(Error::Provider(_)) => "fail provider".into(),
        Next::Fail(Error::Delete(_)) => "fail delete".into(),
        Next::Fail(Error::InvalidService(_)) => "fail invalid".into(),
        Next::Fail(other) => format!("fail {other}"),
    }
}

fn requeue(after: Duration) -> String {
    end(&Next::Return(Action::requeue(after)))
}

fn await_change() -> String {
    end(&Next::Return(Action::await_change()))
}

fn set(
    readiness: Readiness,
    ingress: Option<Vec<LoadBalancerIngress>>,
    on_error: OnError,
) -> Effect {
    Effect::WriteStatus {
        ingress,
        condition: Condition::Set(readiness),
        on_error,
    }
}

fn publish(reason: Reason, note: &str) -> Effect {
    Effect::Publish(reason, note.into())
}

fn state_with(f: impl FnOnce(&mut ObjectState)) -> ObjectState {
    let mut state = ObjectState::default();
    f(&mut state);
    state
}

#[test]
fn after_ensure_table() {
    let now = Instant::now();
    let hashes = (1, 2);
    let fingerprint = 7;
    let addr = ip("127.240.0.1");
    let shown = vec!["127.240.0.1".to_string()];
    let fresh = ObjectState::default();
    let applied = state_with(|s| s.applied = Some(hashes));
    let new_hosts = state_with(|s| s.applied = Some((1, 9)));
    let failing = state_with(|s| s.failures = 3);
    let transient = || ProviderError::retryable("CreateLoadBalancer", "503 from the cloud");
    let transient_readiness = Readiness::from_provider(&transient()).expect("has a condition");
    let user = || ProviderError::user("port 0 is not allowed");
    let user_readiness = Readiness::from_provider(&user()).expect("has a condition");
    let refusal =
        || ProviderError::refused("cannot change the scheme", answer(Some("127.240.0.1")));
    let refusal_readiness = Readiness::from_provider(&refusal()).expect("has a condition");
    let held = || ProviderError::owned_elsewhere("CreateLoadBalancer", "lb-web", "someone");
    let held_readiness =
        Readiness::from_provider(&held()).map(|r| vec![set(r, None, OnError::Log)]);
    let ok = |address: Option<&str>| Ok(answer(address));
    type Row = (
        &'static str,
        ObjectState,
        Result<kube_lb_provider_core::LoadBalancerStatus, ProviderError>,
        Vec<Effect>,
        String,
    );
    let synced = Effect::Record(Update::Synced {
        hashes,
        ingress: addr.clone(),
        fresh_for: timing().resync,
    });
    let rows: Vec<Row> = vec![
        (
            "first ensure succeeds",
            fresh.clone(),
            ok(Some("127.240.0.1")),
            vec![
                set(Readiness::provisioned(&shown), Some(addr.clone()), OnError::Fail),
                publish(Reason::EnsuredLoadBalancer, "Ensured load balancer"),
                Effect::Record(Update::Ensured { hashes }),
                synced.clone(),
                Effect::Outcome(Some(Outcome::Ready(shown.clone()))),
            ],
            requeue(timing().resync),
        ),
        (
            "only the backends changed",
            new_hosts,
            ok(Some("127.240.0.1")),
            vec![
                set(Readiness::provisioned(&shown), Some(addr.clone()), OnError::Fail),
                publish(Reason::UpdatedLoadBalancer, "Updated load balancer with new hosts"),
                Effect::Record(Update::Ensured { hashes }),
                synced.clone(),
                Effect::Outcome(Some(Outcome::Ready(shown.clone()))),
            ],
            requeue(timing().resync),
        ),
        (
            "periodic resync of an unchanged Service: no ensure event",
            applied.clone(),
            ok(Some("127.240.0.1")),
            vec![
                set(Readiness::provisioned(&shown), Some(addr.clone()), OnError::Fail),
                Effect::Record(Update::Ensured { hashes }),
                synced,
                Effect::Outcome(Some(Outcome::Ready(shown.clone()))),
            ],
            requeue(timing().resync),
        ),
        (
            "no address yet: rechecked after the first backoff step",
            applied.clone(),
            ok(None),
            vec![
                set(Readiness::awaiting_address(), Some(Vec::new()), OnError::Fail),
                Effect::Record(Update::Ensured { hashes }),
                Effect::Outcome(Some(Outcome::Retrying(
                    "load balancer has no address yet".into(),
                ))),
                Effect::Echo {
                    hashes: Some(hashes),
                    delay: timing().backoff_base,
                },
            ],
            requeue(timing().backoff_base),
        ),
        (
            "transient error: backoff, warning, condition remembered as an echo",
            fresh.clone(),
            Err(transient()),
            vec![
                Effect::Record(Update::Failed {
                    failures: 1,
                    retry_in: Duration::from_secs(5),
                }),
                publish(
                    Reason::SyncLoadBalancerFailed,
                    "Error syncing load balancer: CreateLoadBalancer: 503 from the cloud; will retry within 5s",
                ),
                Effect::Outcome(Some(Outcome::Retrying(
                    "Error syncing load balancer: CreateLoadBalancer: 503 from the cloud; will retry within 5s".into(),
                ))),
                set(transient_readiness.clone(), None, OnError::Log),
                Effect::Echo {
                    hashes: Some(hashes),
                    delay: Duration::from_secs(5),
                },
            ],
            "fail provider".into(),
        ),
        (
            "fourth transient error: the backoff has doubled three times",
            failing,
            Err(transient()),
            vec![
                Effect::Record(Update::Failed {
                    failures: 4,
                    retry_in: Duration::from_secs(40),
                }),
                publish(
                    Reason::SyncLoadBalancerFailed,
                    "Error syncing load balancer: CreateLoadBalancer: 503 from the cloud; will retry within 40s",
                ),
                Effect::Outcome(Some(Outcome::Retrying(
                    "Error syncing load balancer: CreateLoadBalancer: 503 from the cloud; will retry within 40s".into(),
                ))),
                set(transient_readiness, None, OnError::Log),
                Effect::Echo {
                    hashes: Some(hashes),
                    delay: Duration::from_secs(40),
                },
            ],
            "fail provider".into(),
        ),
        (
            "user error: reported once, waits for a change",
            fresh.clone(),
            Err(user()),
            vec![
                publish(
                    Reason::SyncLoadBalancerFailed,
                    &format!("Error syncing load balancer: {}", user()),
                ),
                Effect::Record(Update::UserError {
                    fingerprint,
                    recheck_at: None,
                    refused: None,
                }),
                Effect::Outcome(Some(Outcome::UserError(user().to_string()))),
                set(user_readiness, None, OnError::Log),
            ],
            "fail provider".into(),
        ),
        (
            "refused change: the serving address stays shown with the refusal",
            applied.clone(),
            Err(refusal()),
            vec![
                publish(
                    Reason::SyncLoadBalancerFailed,
                    &format!("Error syncing load balancer: {}", refusal()),
                ),
                Effect::Record(Update::UserError {
                    fingerprint,
                    recheck_at: None,
                    refused: Some(Refusal {
                        ingress: addr.clone(),
                        readiness: refusal_readiness.clone(),
                    }),
                }),
                Effect::Outcome(Some(Outcome::UserError(refusal().to_string()))),
                set(refusal_readiness, Some(addr.clone()), OnError::Fail),
                Effect::NoteRefusal(shown.clone()),
            ],
            "fail provider".into(),
        ),
        (
            "name held by another owner: rechecked at the backoff ceiling",
            fresh.clone(),
            Err(held()),
            [
                vec![
                    publish(
                        Reason::SyncLoadBalancerFailed,
                        &format!("Error syncing load balancer: {}", held()),
                    ),
                    Effect::Record(Update::UserError {
                        fingerprint,
                        recheck_at: Some(now + timing().backoff_max),
                        refused: None,
                    }),
                    Effect::Outcome(Some(Outcome::UserError(held().to_string()))),
                ],
                held_readiness.unwrap_or_default(),
            ]
            .concat(),
            "fail provider".into(),
        ),
        (
            "implemented elsewhere: no warning, no retry, condition removed",
            fresh,
            Err(ProviderError::ImplementedElsewhere),
            vec![
                Effect::Record(Update::HandedOver { hashes }),
                Effect::Outcome(Some(Outcome::ImplementedElsewhere)),
                Effect::WriteStatus {
                    ingress: None,
                    condition: Condition::Remove,
                    on_error: OnError::Fail,
                },
            ],
            await_change(),
        ),
    ];
    for (case, state, outcome, effects, next) in rows {
        let input = EnsureInput {
            hashes,
            fingerprint,
            warnings: &[],
            timing: timing(),
            jitter: 0.0,
            now,
        };
        let plan = after_ensure(&state, input, outcome);
        assert_eq!(plan.effects, effects, "{case}");
        assert_eq!(end(&plan.next), next, "{case}");
    }
}

#[test]
fn user_error_gate_table() {
    let now = Instant::now();
    let refusal = Refusal {
        ingress: ip("127.240.0.1"),
        readiness: Readiness::provisioned(&["127.240.0.1".to_string()]),
    };
    let rows = [
        (
            "nothing recorded",
            ObjectState::default(),
            "proceed".to_string(),
            vec![],
        ),
        (
            "user error of another version of the Service",
            state_with(|s| s.user_error = Some(8)),
            "proceed".into(),
            vec![],
        ),
        (
            "user error of this version: nothing to do",
            state_with(|s| s.user_error = Some(7)),
            await_change(),
            vec![],
        ),
        (
            "refusal of this version: shown again",
            state_with(|s| {
                s.user_error = Some(7);
                s.refused = Some(refusal.clone());
            }),
            await_change(),
            vec![set(
                refusal.readiness.clone(),
                Some(refusal.ingress.clone()),
                OnError::Fail,
            )],
        ),
        (
            "recheck pending: kept",
            state_with(|s| {
                s.user_error = Some(7);
                s.recheck_at = Some(now + 30 * SECOND);
            }),
            requeue(30 * SECOND),
            vec![],
        ),
        (
            "recheck due",
            state_with(|s| {
                s.user_error = Some(7);
                s.recheck_at = Some(now);
            }),
            "recheck".into(),
            vec![],
        ),
    ];
    for (case, state, want, effects) in rows {
        let (got, got_effects) = match user_error_gate(&state, 7, now) {
            Gate::Proceed => ("proceed".to_string(), vec![]),
            Gate::Recheck => ("recheck".to_string(), vec![]),
            Gate::Hold(plan) => (end(&plan.next), plan.effects),
        };
        assert_eq!((got, got_effects), (want, effects), "{case}");
    }
}

#[test]
fn skip_table() {
    let now = Instant::now();
    let hashes = (1, 2);
    let addr = ip("127.240.0.1");
    let synced = state_with(|s| {
        s.synced = Some(Synced {
            hashes,
            ingress: addr.clone(),
            fresh_until: now + 60 * SECOND,
        });
    });
    let echoed = state_with(|s| {
        s.echo = Some(Echo {
            resource_version: "5".into(),
            hashes: Some(hashes),
            retry_at: now + 10 * SECOND,
        });
    });
    let warned = vec!["ignored: x".to_string()];
    let readiness = Readiness::provisioned(&["127.240.0.1".to_string()]).with_ignored(&warned);
    let rows = [
        (
            "in sync: no ensure, condition kept current",
            &synced,
            service("5", Some(addr.clone())),
            hashes,
            Some((
                Skip::InSync(60 * SECOND),
                vec![set(readiness, None, OnError::Fail)],
            )),
        ),
        (
            "spec changed",
            &synced,
            service("5", Some(addr.clone())),
            (9, 2),
            None,
        ),
        ("status wiped", &synced, service("5", None), hashes, None),
        (
            "own status write of a failure",
            &echoed,
            service("5", None),
            hashes,
            Some((Skip::Echo(10 * SECOND), vec![])),
        ),
        (
            "written by someone else since",
            &echoed,
            service("6", None),
            hashes,
            None,
        ),
        (
            "echo of another spec",
            &echoed,
            service("5", None),
            (9, 2),
            None,
        ),
    ];
    for (case, state, service, hashes, want) in rows {
        let got = skip(state, &service, hashes, &warned, now).map(|(why, plan)| {
            let action = match plan.next {
                Next::Return(action) => action,
                other => panic!("{case}: {other:?}"),
            };
            let wait = match why {
                Skip::InSync(d) | Skip::Echo(d) => d,
            };
            assert_eq!(action, Action::requeue(wait), "{case}");
            (why, plan.effects)
        });
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn ensure_cause_tells_a_spec_change_from_a_host_update() {
    use crate::metrics::EnsureCause;
    let rows = [
        ("never applied", ObjectState::default(), EnsureCause::Spec),
        (
            "spec changed",
            state_with(|s| s.applied = Some((9, 2))),
            EnsureCause::Spec,
        ),
        (
            "spec and backends changed",
            state_with(|s| s.applied = Some((9, 9))),
            EnsureCause::Spec,
        ),
        (
            "only the backends changed",
            state_with(|s| s.applied = Some((1, 9))),
            EnsureCause::Hosts,
        ),
        (
            "unchanged",
            state_with(|s| s.applied = Some((1, 2))),
            EnsureCause::Resync,
        ),
    ];
    for (case, state, want) in rows {
        assert_eq!(ensure_cause(&state, (1, 2)), want, "{case}");
    }
}

#[test]
fn before_ensure_announces_only_a_new_spec() {
    let rows = [
        ("never applied", ObjectState::default(), true),
        (
            "spec changed",
            state_with(|s| s.applied = Some((9, 2))),
            true,
        ),
        (
            "only the backends changed",
            state_with(|s| s.applied = Some((1, 9))),
            false,
        ),
        ("unchanged", state_with(|s| s.applied = Some((1, 2))), false),
    ];
    for (case, state, announced) in rows {
        let plan = before_ensure(&state, (1, 2));
        let mut want = vec![Effect::Record(Update::Unsynced)];
        if announced {
            want.push(publish(
                Reason::EnsuringLoadBalancer,
                "Ensuring load balancer",
            ));
        }
        assert_eq!(plan.effects, want, "{case}");
        assert_eq!(end(&plan.next), "call", "{case}");
    }
}

#[test]
fn delete_table() {
    let error = || ProviderError::retryable("DeleteLoadBalancer", "503");
    let deleted = vec![
        publish(Reason::DeletedLoadBalancer, "Deleted load balancer"),
        Effect::Forget,
    ];
    let failed = |failures, within: &str, delay| {
        vec![
            Effect::Record(Update::Failed {
                failures,
                retry_in: delay,
            }),
            publish(
                Reason::SyncLoadBalancerFailed,
                &format!(
                    "Error deleting load balancer: {}; will retry within {within}",
                    error()
                ),
            ),
            set(Readiness::delete_failed(&error()), None, OnError::Log),
            Effect::Echo {
                hashes: None,
                delay,
            },
        ]
    };
    let rows = [
        (
            "deleted: finalizer removed",
            ObjectState::default(),
            true,
            Ok(()),
            [deleted.clone(), vec![Effect::Finalizer(false)]].concat(),
            await_change(),
        ),
        (
            "deleted during a release: the finalizer waits for the status",
            ObjectState::default(),
            false,
            Ok(()),
            deleted.clone(),
            await_change(),
        ),
        (
            "implemented elsewhere: nothing of ours to delete",
            ObjectState::default(),
            true,
            Err(ProviderError::ImplementedElsewhere),
            [deleted, vec![Effect::Finalizer(false)]].concat(),
            await_change(),
        ),
        (
            "delete failed: finalizer kept, retried",
            ObjectState::default(),
            true,
            Err(error()),
            failed(1, "5s", 5 * SECOND),
            "fail delete".into(),
        ),
        (
            "delete failed again",
            state_with(|s| s.failures = 1),
            true,
            Err(error()),
            failed(2, "10s", 10 * SECOND),
            "fail delete".into(),
        ),
    ];
    for (case, state, finalize, outcome, effects, next) in rows {
        let plan = after_delete(&state, timing(), 0.0, finalize, outcome);
        assert_eq!(plan.effects, effects, "{case}");
        assert_eq!(end(&plan.next), next, "{case}");
    }
}

#[test]
fn before_delete_waits_out_its_own_echo() {
    let now = Instant::now();
    let echoed = state_with(|s| {
        s.echo = Some(Echo {
            resource_version: "5".into(),
            hashes: None,
            retry_at: now + 10 * SECOND,
        });
    });
    let announce = vec![publish(
        Reason::DeletingLoadBalancer,
        "Deleting load balancer",
    )];
    let rows = [
        (
            "nothing pending",
            ObjectState::default(),
            "5",
            announce.clone(),
            "call".to_string(),
        ),
        (
            "own write of the failure",
            echoed.clone(),
            "5",
            vec![],
            requeue(10 * SECOND),
        ),
        ("changed since", echoed, "6", announce, "call".into()),
    ];
    for (case, state, rv, effects, next) in rows {
        let plan = before_delete(&state, &service(rv, None), now);
        assert_eq!(plan.effects, effects, "{case}");
        assert_eq!(end(&plan.next), next, "{case}");
    }
}

#[test]
fn release_and_finalizer_table() {
    let rows = [
        (
            "add before any cloud call",
            add_finalizer(),
            vec![Effect::Finalizer(true)],
            await_change(),
        ),
        (
            "released",
            finish_release(false, SECOND),
            vec![Effect::Finalizer(false)],
            await_change(),
        ),
        (
            "ours again meanwhile: finalizer kept",
            finish_release(true, SECOND),
            vec![],
            requeue(SECOND),
        ),
    ];
    for (case, plan, effects, next) in rows {
        assert_eq!(plan.effects, effects, "{case}");
        assert_eq!(end(&plan.next), next, "{case}");
    }
}

#[test]
fn annotation_warnings_are_published_once_per_version() {
    let warnings = vec!["a".to_string(), "b".to_string()];
    let rows = [
        ("no warnings", ObjectState::default(), vec![], vec![]),
        (
            "first time",
            ObjectState::default(),
            warnings.clone(),
            vec![
                Effect::Record(Update::Warned(7)),
                publish(Reason::AnnotationWarning, "a; b"),
            ],
        ),
        (
            "already published for this version",
            state_with(|s| s.warned = Some(7)),
            warnings.clone(),
            vec![Effect::Record(Update::Warned(7))],
        ),
        (
            "another version",
            state_with(|s| s.warned = Some(8)),
            warnings,
            vec![
                Effect::Record(Update::Warned(7)),
                publish(Reason::AnnotationWarning, "a; b"),
            ],
        ),
    ];
    for (case, state, warnings, effects) in rows {
        assert_eq!(annotation_warnings(&state, &warnings, 7), effects, "{case}");
    }
}

#[test]
fn updates_record_what_they_say() {
    let now = Instant::now();
    let mut state = state_with(|s| {
        s.failures = 3;
        s.user_error = Some(1);
        s.recheck_at = Some(now);
        s.echo = Some(Echo {
            resource_version: "1".into(),
            hashes: None,
            retry_at: now,
        });
    });
    Update::Ensured { hashes: (1, 2) }.record(&mut state, now);
    assert_eq!(
        (
            state.failures,
            state.user_error,
            state.recheck_at,
            state.applied,
            state.echo.is_none()
        ),
        (0, None, None, Some((1, 2)), true)
    );
    Update::Synced {
        hashes: (1, 2),
        ingress: ip("127.240.0.1"),
        fresh_for: 60 * SECOND,
    }
    .record(&mut state, now);
    assert_eq!(
        state.synced.as_ref().map(|s| s.fresh_until),
        Some(now + 60 * SECOND)
    );
    Update::Failed {
        failures: 2,
        retry_in: 7 * SECOND,
    }
    .record(&mut state, now);
    assert_eq!((state.failures, state.retry_in), (2, Some(7 * SECOND)));
}
