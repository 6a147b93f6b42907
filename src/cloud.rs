//! Choosing and building the load-balancer provider from the command line.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use kube_lb_annotations::Cloud;
use kube_lb_provider_core::{CallCounter, LoadBalancerProvider};
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
    pub cluster_name: String,

    /// Identity of this cluster, marked on the load balancers of providers that name them
    /// after the Service's namespace/name (OpenStack's tags, Baidu's descriptions): with it, a load balancer that a deleted
    /// Service left behind is removed when a new Service of that namespace/name comes, and
    /// one of another cluster with the same --cluster-name is still refused. Default: the UID
    /// of the cluster's kube-system namespace, read at start (not from the embedded API
    /// server of -f manifests, whose namespace is new every run).
    #[arg(long, env = "KUBE_LB_CLUSTER_ID", value_parser = parse_cluster_id)]
    pub cluster_id: Option<String>,

    /// Address ranges of the `local` provider: CIDRs or FIRST-LAST, comma separated.
    #[arg(long, env = "KUBE_LB_LOCAL_POOL", value_delimiter = ',', default_value = DEFAULT_POOL)]
    pub local_pool: Vec<IpRange>,
}

/// How long the start waits for the kube-system namespace (the cluster's identity).
const IDENTITY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Accepts a `--cluster-id`: 1 to 63 letters, digits, `-`, `_` or `.` (it goes into cloud
/// tags, which reject `,` and `/`).
fn parse_cluster_id(value: &str) -> Result<String, String> {
    let valid = (1..=63).contains(&value.len())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(value.to_string())
    } else {
        Err(format!(
            "{value:?} is not a cluster identity: 1 to 63 letters, digits, '-', '_' or '.'"
        ))
    }
}

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
            .and_then(|uid| parse_cluster_id(&uid));
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
    match args.cloud {
        CloudName::Local => local_provider(args.local_pool.clone(), counter),
        CloudName::Aws => aws(args, counter).await,
        CloudName::Gcp => gcp(args, counter).await,
        CloudName::Azure => azure(args, counter).await,
        CloudName::Openstack => openstack(args, counter).await,
        CloudName::Baidu => baidu(args, counter).await,
        CloudName::Tencent => tencent(args, counter).await,
    }
}

#[cfg(any(
    feature = "aws",
    feature = "gcp",
    feature = "azure",
    feature = "openstack",
    feature = "baidu",
    feature = "tencent"
))]
fn cloud_provider(provider: Arc<dyn LoadBalancerProvider>) -> Provider {
    Provider {
        provider,
        local: None,
    }
}

#[cfg(feature = "aws")]
async fn aws(args: &CloudArgs, counter: CallCounter) -> anyhow::Result<Provider> {
    let provider = kube_lb_provider_aws::AwsProvider::from_cloud_config(
        args.cloud_config.as_deref(),
        &args.cluster_name,
        counter,
    )
    .await
    .context("configuring the AWS provider")?;
    Ok(cloud_provider(Arc::new(provider)))
}

#[cfg(not(feature = "aws"))]
async fn aws(_args: &CloudArgs, _counter: CallCounter) -> anyhow::Result<Provider> {
    anyhow::bail!("--cloud aws: this kube-lb was built without the `aws` cargo feature")
}

#[cfg(feature = "gcp")]
async fn gcp(args: &CloudArgs, counter: CallCounter) -> anyhow::Result<Provider> {
    let provider = kube_lb_provider_gcp::GcpProvider::from_cloud_config(
        args.cloud_config.as_deref(),
        &args.cluster_name,
        counter,
    )
    .await
    .context("configuring the GCP provider")?;
    Ok(cloud_provider(Arc::new(provider)))
}

#[cfg(not(feature = "gcp"))]
async fn gcp(_args: &CloudArgs, _counter: CallCounter) -> anyhow::Result<Provider> {
    anyhow::bail!("--cloud gcp: this kube-lb was built without the `gcp` cargo feature")
}

#[cfg(feature = "azure")]
async fn azure(args: &CloudArgs, counter: CallCounter) -> anyhow::Result<Provider> {
    let provider = kube_lb_provider_azure::AzureProvider::from_cloud_config(
        args.cloud_config.as_deref(),
        &args.cluster_name,
        counter,
    )
    .await
    .context("configuring the Azure provider")?;
    Ok(cloud_provider(Arc::new(provider)))
}

#[cfg(not(feature = "azure"))]
async fn azure(_args: &CloudArgs, _counter: CallCounter) -> anyhow::Result<Provider> {
    anyhow::bail!("--cloud azure: this kube-lb was built without the `azure` cargo feature")
}

#[cfg(feature = "openstack")]
async fn openstack(args: &CloudArgs, counter: CallCounter) -> anyhow::Result<Provider> {
    let provider = kube_lb_provider_openstack::OpenStackProvider::from_cloud_config(
        args.cloud_config.as_deref(),
        &args.cluster_name,
        counter,
    )
    .await
    .context("configuring the OpenStack provider")?
    .with_cluster_id(args.cluster_id.as_deref());
    Ok(cloud_provider(Arc::new(provider)))
}

#[cfg(not(feature = "openstack"))]
async fn openstack(_args: &CloudArgs, _counter: CallCounter) -> anyhow::Result<Provider> {
    anyhow::bail!("--cloud openstack: this kube-lb was built without the `openstack` cargo feature")
}

#[cfg(feature = "baidu")]
async fn baidu(args: &CloudArgs, counter: CallCounter) -> anyhow::Result<Provider> {
    let provider = kube_lb_provider_baidu::BaiduProvider::from_cloud_config(
        args.cloud_config.as_deref(),
        &args.cluster_name,
        counter,
    )
    .await
    .context("configuring the Baidu provider")?
    .with_cluster_id(args.cluster_id.as_deref());
    Ok(cloud_provider(Arc::new(provider)))
}

#[cfg(not(feature = "baidu"))]
async fn baidu(_args: &CloudArgs, _counter: CallCounter) -> anyhow::Result<Provider> {
    anyhow::bail!("--cloud baidu: this kube-lb was built without the `baidu` cargo feature")
}

#[cfg(feature = "tencent")]
async fn tencent(args: &CloudArgs, counter: CallCounter) -> anyhow::Result<Provider> {
    let provider = kube_lb_provider_tencent::TencentProvider::from_cloud_config(
        args.cloud_config.as_deref(),
        &args.cluster_name,
        counter,
    )
    .await
    .context("configuring the Tencent provider")?;
    Ok(cloud_provider(Arc::new(provider)))
}

#[cfg(not(feature = "tencent"))]
async fn tencent(_args: &CloudArgs, _counter: CallCounter) -> anyhow::Result<Provider> {
    anyhow::bail!("--cloud tencent: this kube-lb was built without the `tencent` cargo feature")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_go_into_cloud_tags_unchanged_or_are_refused() {
        let uid = "3f2c9d8e-1b7a-4c5e-9f00-123456789abc";
        for (value, ok) in [
            (uid, true),
            ("prod.eu-1_a", true),
            ("", false),
            ("a/b", false),
            ("a,b", false),
            ("with space", false),
            (&*"x".repeat(64), false),
        ] {
            let parsed = parse_cluster_id(value);
            assert_eq!(parsed.is_ok(), ok, "{value:?}: {parsed:?}");
            match parsed {
                Ok(id) => assert_eq!(id, value),
                Err(message) => assert!(message.contains("cluster identity"), "{message}"),
            }
        }
    }
}
