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

    /// Address ranges of the `local` provider: CIDRs or FIRST-LAST, comma separated.
    #[arg(long, env = "KUBE_LB_LOCAL_POOL", value_delimiter = ',', default_value = DEFAULT_POOL)]
    pub local_pool: Vec<IpRange>,
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
    .context("configuring the OpenStack provider")?;
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
    .context("configuring the Baidu provider")?;
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
