//! Choosing and building the load-balancer provider from the command line.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use anyhow::Context as _;
use kube_lb_annotations::Cloud;
use kube_lb_provider_core::{CallCounter, ClusterIdentity, ClusterName, LoadBalancerProvider};
use kube_lb_provider_local::{DEFAULT_POOL, IpRange, LocalProvider, Pool};

/// The providers this binary knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CloudName {
    /// Addresses from a pool on this machine (the embedded default).
    Local,
    /// Amazon Web Services (Classic ELB / NLB); needs the `aws` cargo feature.
    Aws,
    /// Google Cloud; needs the `gcp` cargo feature.
    Gcp,
    /// Microsoft Azure; needs the `azure` cargo feature.
    Azure,
    /// OpenStack (Octavia + Neutron); needs the `openstack` cargo feature.
    Openstack,
    /// Baidu Cloud (BLB + EIP); needs the `baidu` cargo feature.
    Baidu,
    /// Tencent Cloud (CLB, TKE annotations); needs the `tencent` cargo feature.
    Tencent,
}

impl CloudName {
    /// Whose annotations the controller interprets.
    pub fn annotations_cloud(self) -> Cloud {
        match self {
            CloudName::Local => Cloud::Local,
            CloudName::Aws => Cloud::Aws,
            CloudName::Gcp => Cloud::Gcp,
            CloudName::Azure => Cloud::Azure,
            CloudName::Openstack => Cloud::Openstack,
            CloudName::Baidu => Cloud::Baidu,
            CloudName::Tencent => Cloud::Tencent,
        }
    }

    /// The cargo feature that compiles this provider in; `None` for `local`, always built.
    pub fn feature(self) -> Option<&'static str> {
        match self {
            CloudName::Local => None,
            CloudName::Aws => Some("aws"),
            CloudName::Gcp => Some("gcp"),
            CloudName::Azure => Some("azure"),
            CloudName::Openstack => Some("openstack"),
            CloudName::Baidu => Some("baidu"),
            CloudName::Tencent => Some("tencent"),
        }
    }
}

/// Provider selection flags shared by `controller` and `reconcile`.
#[derive(Debug, Clone, clap::Args)]
pub struct CloudArgs {
    /// Which provider builds the load balancers.
    #[arg(long, value_enum, env = "KUBE_LB_CLOUD", default_value_t = CloudName::Local)]
    pub cloud: CloudName,

    /// Provider configuration file (region, endpoint overrides, ...), as the cloud expects.
    #[arg(long, env = "KUBE_LB_CLOUD_CONFIG")]
    pub cloud_config: Option<PathBuf>,

    /// Cluster name used in load-balancer ownership tags (`kubernetes.io/cluster/<name>`).
    #[arg(long, env = "KUBE_LB_CLUSTER_NAME", default_value = "kubernetes")]
    pub cluster_name: ClusterName,

    /// Identity of this cluster, marked on the load balancers of providers that name them
    /// after the Service's namespace/name (OpenStack's tags, Baidu's descriptions): with it, a load balancer that a deleted
    /// Service left behind is removed when a new Service of that namespace/name comes, and
    /// one of another cluster with the same --cluster-name is still refused. Default: the UID
    /// of the cluster's kube-system namespace, read at start (not from the embedded API
    /// server of -f manifests, whose namespace is new every run).
    #[arg(long, env = "KUBE_LB_CLUSTER_ID")]
    pub cluster_id: Option<ClusterIdentity>,

    /// Address ranges of the `local` provider: CIDRs or FIRST-LAST, comma separated.
    #[arg(long, env = "KUBE_LB_LOCAL_POOL", value_delimiter = ',', default_value = DEFAULT_POOL)]
    pub local_pool: Vec<IpRange>,
}

/// How long the start waits for the kube-system namespace (the cluster's identity).
const IDENTITY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl CloudArgs {
    /// These arguments with `cluster_id` read from the cluster behind `client` (the UID of
    /// its kube-system namespace) when `--cluster-id` gave none. When it cannot be read
    /// (a ClusterRole without `get` on that namespace, say), it stays unknown, with a
    /// warning that says what that costs.
    pub async fn with_cluster_identity(&self, client: &kube::Client) -> CloudArgs {
        let mut args = self.clone();
        if args.cluster_id.is_none() {
            let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
                kube::Api::all(client.clone());
            // Bounded: an API server that hangs here must not hold up the start.
            let read =
                tokio::time::timeout(IDENTITY_READ_TIMEOUT, namespaces.get("kube-system")).await;
            let uid = match read {
                Ok(Ok(namespace)) => namespace
                    .metadata
                    .uid
                    .ok_or_else(|| "the namespace has no UID".to_string()),
                Ok(Err(error)) => Err(error.to_string()),
                Err(_) => Err(format!("no answer within {IDENTITY_READ_TIMEOUT:?}")),
            }
            // Checked like a --cluster-id: it goes into cloud tags.
            .and_then(|uid| ClusterIdentity::new(uid).map_err(|error| error.to_string()));
            match uid {
                Ok(id) => args.cluster_id = Some(id),
                Err(error) => tracing::warn!(
                    %error,
                    "cannot read the kube-system namespace's UID, the cluster's identity: a load balancer a deleted Service left behind under a namespace/name (OpenStack) will need a person to remove it; give --cluster-id to set the identity"
                ),
            }
        }
        if let Some(id) = &args.cluster_id {
            tracing::info!(cluster = %args.cluster_name, cluster_id = %id, "cluster identity");
        }
        args
    }

    /// What every provider constructor is given, borrowed from these arguments.
    pub fn build_options(&self, counter: CallCounter) -> BuildOptions<'_> {
        BuildOptions {
            cloud_config: self.cloud_config.as_deref(),
            cluster_name: &self.cluster_name,
            cluster_identity: self.cluster_id.as_ref(),
            counter,
            local_pool: &self.local_pool,
        }
    }
}

/// A built provider, plus the concrete `local` one when that was chosen (its address set
/// feeds `kube-lb up`).
#[derive(Debug, Clone)]
pub struct Provider {
    /// The provider the controller calls.
    pub provider: Arc<dyn LoadBalancerProvider>,
    /// The same provider when it is `local`.
    pub local: Option<Arc<LocalProvider>>,
}

impl Provider {
    /// A cloud provider (not `local`), as the table's entries build them.
    pub fn cloud(provider: impl LoadBalancerProvider + 'static) -> Self {
        Provider {
            provider: Arc::new(provider),
            local: None,
        }
    }
}

/// Everything a provider constructor may use, resolved once from the command line.
#[derive(Debug, Clone)]
pub struct BuildOptions<'a> {
    /// `--cloud-config`.
    pub cloud_config: Option<&'a Path>,
    /// `--cluster-name`, for ownership tags.
    pub cluster_name: &'a ClusterName,
    /// `--cluster-id` or the kube-system UID, when known; only providers that name load
    /// balancers after namespace/name use it.
    pub cluster_identity: Option<&'a ClusterIdentity>,
    /// Where every cloud call is counted (the callers' `/metrics` observe it).
    pub counter: CallCounter,
    /// `--local-pool`, for the `local` provider.
    pub local_pool: &'a [IpRange],
}

/// The future a [`ProviderFactory`] returns.
type Building<'a> = Pin<Box<dyn Future<Output = anyhow::Result<Provider>> + Send + 'a>>;

/// How to build one compiled-in provider.
#[derive(Clone, Copy)]
pub struct ProviderFactory {
    /// The `--cloud` value it answers to.
    pub cloud: CloudName,
    /// Builds it from the shared options.
    pub build: for<'a> fn(&'a BuildOptions<'a>) -> Building<'a>,
}

impl std::fmt::Debug for ProviderFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderFactory")
            .field("cloud", &self.cloud)
            .finish_non_exhaustive()
    }
}

/// One entry per provider compiled into this binary. A provider's cargo feature gates its
/// entry here and nowhere else in this file.
pub const PROVIDERS: &[ProviderFactory] = &[
    ProviderFactory {
        cloud: CloudName::Local,
        build: |o| {
            Box::pin(async move { local_provider(o.local_pool.to_vec(), o.counter.clone()) })
        },
    },
    #[cfg(feature = "aws")]
    ProviderFactory {
        cloud: CloudName::Aws,
        build: |o| {
            Box::pin(async move {
                let provider = kube_lb_provider_aws::AwsProvider::from_cloud_config(
                    o.cloud_config,
                    o.cluster_name,
                    o.counter.clone(),
                )
                .await
                .context("configuring the AWS provider")?;
                Ok(Provider::cloud(provider))
            })
        },
    },
    #[cfg(feature = "gcp")]
    ProviderFactory {
        cloud: CloudName::Gcp,
        build: |o| {
            Box::pin(async move {
                let provider = kube_lb_provider_gcp::GcpProvider::from_cloud_config(
                    o.cloud_config,
                    o.cluster_name,
                    o.counter.clone(),
                )
                .await
                .context("configuring the GCP provider")?;
                Ok(Provider::cloud(provider))
            })
        },
    },
    #[cfg(feature = "azure")]
    ProviderFactory {
        cloud: CloudName::Azure,
        build: |o| {
            Box::pin(async move {
                let provider = kube_lb_provider_azure::AzureProvider::from_cloud_config(
                    o.cloud_config,
                    o.cluster_name,
                    o.counter.clone(),
                )
                .await
                .context("configuring the Azure provider")?;
                Ok(Provider::cloud(provider))
            })
        },
    },
    #[cfg(feature = "openstack")]
    ProviderFactory {
        cloud: CloudName::Openstack,
        build: |o| {
            Box::pin(async move {
                let provider = kube_lb_provider_openstack::OpenStackProvider::from_cloud_config(
                    o.cloud_config,
                    o.cluster_name,
                    o.counter.clone(),
                )
                .await
                .context("configuring the OpenStack provider")?
                .with_cluster_id(o.cluster_identity);
                Ok(Provider::cloud(provider))
            })
        },
    },
    #[cfg(feature = "baidu")]
    ProviderFactory {
        cloud: CloudName::Baidu,
        build: |o| {
            Box::pin(async move {
                let provider = kube_lb_provider_baidu::BaiduProvider::from_cloud_config(
                    o.cloud_config,
                    o.cluster_name,
                    o.counter.clone(),
                )
                .await
                .context("configuring the Baidu provider")?
                .with_cluster_id(o.cluster_identity);
                Ok(Provider::cloud(provider))
            })
        },
    },
    #[cfg(feature = "tencent")]
    ProviderFactory {
        cloud: CloudName::Tencent,
        build: |o| {
            Box::pin(async move {
                let provider = kube_lb_provider_tencent::TencentProvider::from_cloud_config(
                    o.cloud_config,
                    o.cluster_name,
                    o.counter.clone(),
                )
                .await
                .context("configuring the Tencent provider")?;
                Ok(Provider::cloud(provider))
            })
        },
    },
];

/// The factory of `cloud`, or an error naming the cargo feature that would compile it in.
pub fn lookup(cloud: CloudName) -> anyhow::Result<&'static ProviderFactory> {
    PROVIDERS
        .iter()
        .find(|factory| factory.cloud == cloud)
        .ok_or_else(|| {
            let name = cloud.feature().unwrap_or("local");
            anyhow::anyhow!(
                "--cloud {name}: this kube-lb was built without the `{name}` cargo feature"
            )
        })
}

/// A `local` provider over `ranges`.
pub fn local_provider(ranges: Vec<IpRange>, counter: CallCounter) -> anyhow::Result<Provider> {
    let pool = Pool::new(ranges).context("invalid --local-pool")?;
    let local = Arc::new(LocalProvider::new(pool, counter));
    Ok(Provider {
        provider: local.clone(),
        local: Some(local),
    })
}

/// Builds the provider chosen by `args`. Every provider makes its calls through
/// [`kube_lb_provider_core::CloudApi`] and counts them on `counter`, which the callers
/// (`controller`, `reconcile`, `up`) hand to their `/metrics`.
pub async fn build(args: &CloudArgs, counter: CallCounter) -> anyhow::Result<Provider> {
    let factory = lookup(args.cloud)?;
    (factory.build)(&args.build_options(counter)).await
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum as _;

    use super::*;

    #[test]
    fn every_cloud_is_in_the_table_exactly_when_its_feature_is_on() {
        for cloud in CloudName::value_variants() {
            let compiled = match cloud.feature() {
                None => true,
                Some("aws") => cfg!(feature = "aws"),
                Some("gcp") => cfg!(feature = "gcp"),
                Some("azure") => cfg!(feature = "azure"),
                Some("openstack") => cfg!(feature = "openstack"),
                Some("baidu") => cfg!(feature = "baidu"),
                Some("tencent") => cfg!(feature = "tencent"),
                Some(other) => panic!("unknown feature {other}"),
            };
            let found = lookup(*cloud);
            assert_eq!(found.is_ok(), compiled, "{cloud:?}");
            match found {
                Ok(factory) => assert_eq!(factory.cloud, *cloud),
                Err(error) => {
                    let feature = cloud.feature().unwrap_or_default();
                    assert!(
                        error
                            .to_string()
                            .contains(&format!("`{feature}` cargo feature")),
                        "{error}"
                    );
                }
            }
            let entries = PROVIDERS.iter().filter(|f| f.cloud == *cloud).count();
            assert_eq!(entries, usize::from(compiled), "{cloud:?}");
        }
    }

    #[tokio::test]
    async fn the_local_entry_builds_the_local_provider() {
        let args = CloudArgs {
            cloud: CloudName::Local,
            cloud_config: None,
            cluster_name: ClusterName::new("kubernetes").expect("a valid name"),
            cluster_id: None,
            local_pool: vec!["127.0.0.100-127.0.0.101".parse().expect("a valid range")],
        };
        let built = build(&args, CallCounter::new())
            .await
            .expect("local builds");
        assert_eq!(built.provider.name(), "local");
        assert!(built.local.is_some());
    }

    #[test]
    fn cluster_flags_are_checked_when_read() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            cloud: CloudArgs,
        }
        use clap::Parser as _;
        let parsed = Cli::try_parse_from(["kube-lb", "--cluster-id", "a/b"]);
        assert!(parsed.is_err());
        let parsed = Cli::try_parse_from(["kube-lb", "--cluster-name", ""]);
        assert!(parsed.is_err());
        let parsed = Cli::try_parse_from(["kube-lb", "--cluster-id", "3f2c9d8e-1b7a"])
            .expect("a valid identity");
        assert_eq!(parsed.cloud.cluster_name.as_str(), "kubernetes");
        assert_eq!(
            parsed
                .cloud
                .cluster_id
                .as_ref()
                .map(ClusterIdentity::as_str),
            Some("3f2c9d8e-1b7a")
        );
    }
}
