//! The binary's integration tests, compiled as one test binary: one link and one set of generic
//! instantiations (kube clients, AWS SDK, tokio) instead of one per file, which keeps the cold
//! build of `.ci/run` short. nextest still runs every test in its own process; select a group
//! with e.g. `cargo nextest run -E 'test(/^controller_lifecycle::/)'`.

#![allow(clippy::unwrap_used)] // test set-up: a failed unwrap is a failed test

mod cloud_fixtures;
mod controller_support;

mod chaos;
mod controller_backends;
mod controller_baidu;
mod controller_binary;
mod controller_churn;
mod controller_decode;
mod controller_events;
mod controller_lifecycle;
mod controller_metrics;
mod controller_resilience;
mod dataplane_proxy_cli;
mod dataplane_userspace_cli;
mod deploy_bgp;
mod deploy_iam;
mod deploy_rbac;
mod deploy_webhook;
mod docs_links;
mod fuzz_lint;
mod kubectl_legacy;
mod kubectl_plugin;
mod leader_election;
mod lint;
mod local_pools;
mod manifest_identity;
mod metric_table;
mod monitoring;
mod openstack_writeback;
mod plan_audit;
mod plan_audit_baidu;
mod plan_audit_openstack;
mod plan_audit_support;
mod plan_audit_tencent;
mod provider_scenarios;
mod reconcile_aws;
mod reconcile_cli;
mod reconcile_clouds;
mod service_conditions;
mod tencent_refusal;
mod tencent_writeback;
mod up_dataplane;
mod up_demo;
mod webhook;
