//! Picks the agent's sources from the configuration: standalone files (ExternalNode file and
//! policy directory), or Kubernetes mode (the ExternalNode from kube-apiserver, policies from
//! antrea-controller's watches with an on-disk fallback, and both API connections for the
//! reporter's writes).

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::file::FileSource;
use super::kube_external_node::KubeExternalNodeSource;
use super::policy_dir::PolicyDirSource;
use super::{ExternalNodeSource, PolicySource};
use crate::config::Config;
use crate::k8s::api::ApiClient;
use crate::k8s::client::{ClientError, KubeApiClient, Liveness, LivenessEnvError};
use crate::k8s::fallback::FallbackStore;
use crate::k8s::ClusterClients;
use crate::sources::controlplane_watch::ControlplaneSource;

/// How often standalone files are re-read.
const STANDALONE_POLL: Duration = Duration::from_millis(500);

/// Where the ExternalNode and the policies come from, and where status goes.
pub struct Selected {
    pub external_node: Arc<dyn ExternalNodeSource>,
    pub policies: Option<Arc<dyn PolicySource>>,
    pub cluster: Option<ClusterClients>,
}

/// Why the sources of Kubernetes mode could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error("clientConnection.kubeconfig is required without a standalone section")]
    NoKubeconfig,
    #[error(transparent)]
    Liveness(#[from] LivenessEnvError),
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Builds the sources for `config` and the node `node_name`. In Kubernetes mode this creates the
/// API clients, so it must run inside the runtime that will drive them.
pub fn select(config: &Config, node_name: &str) -> Result<Selected, SelectError> {
    if let Some(standalone) = &config.standalone {
        return Ok(Selected {
            external_node: Arc::new(
                FileSource::new(&standalone.external_node_file, STANDALONE_POLL)
                    .with_limits(standalone.input_limits.clone()),
            ),
            policies: standalone.policy_dir.clone().map(|dir| {
                Arc::new(
                    PolicyDirSource::new(dir, STANDALONE_POLL)
                        .with_limits(standalone.input_limits.clone())
                        .with_external_node_file(&standalone.external_node_file),
                ) as Arc<dyn PolicySource>
            }),
            cluster: None,
        });
    }
    let kubeconfig = config.kubeconfig.as_ref().ok_or(SelectError::NoKubeconfig)?;
    let liveness = Liveness::from_env()?;
    let kube: Arc<dyn ApiClient> = Arc::new(KubeApiClient::from_kubeconfig_with(
        kubeconfig,
        "kube-apiserver",
        liveness,
    )?);
    let controller: Arc<dyn ApiClient> = match &config.antrea_kubeconfig {
        Some(path) => Arc::new(KubeApiClient::from_kubeconfig_with(
            path,
            "antrea-controller",
            liveness,
        )?),
        None => {
            // The controlplane API is also registered as an APIService, so kube-apiserver's
            // aggregation layer serves the same paths.
            warn!(
                "antreaClientConnection.kubeconfig is not set: reaching antrea-controller through \
                 kube-apiserver's aggregation layer"
            );
            kube.clone()
        }
    };
    let namespace = &config.external_node_namespace;
    info!(kube = %kube.describe(), controller = %controller.describe(), "Kubernetes mode");
    let node_key = format!("{namespace}/{node_name}");
    let policies = ControlplaneSource::new(controller.clone(), node_key)
        .with_fallback(FallbackStore::in_state_dir(&config.state_dir));
    Ok(Selected {
        external_node: Arc::new(KubeExternalNodeSource::new(kube.clone(), namespace, node_name)),
        policies: Some(Arc::new(policies)),
        cluster: Some(ClusterClients { kube, controller }),
    })
}
