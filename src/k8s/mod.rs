//! Kubernetes-facing types. For now the ExternalNode CRD (crd.antrea.io/v1alpha1), which the
//! standalone mode also reads from a local file.

pub mod agent_info;
pub mod api;
pub mod client;
pub mod external_node;
#[cfg(any(test, feature = "test-util"))]
pub mod fake_api;
pub mod fallback;
pub mod policy_status;
pub mod stats_summary;
pub mod write_log;

use std::sync::Arc;

/// The two connections of Kubernetes mode.
#[derive(Clone)]
pub struct ClusterClients {
    /// kube-apiserver (`clientConnection.kubeconfig`): ExternalNode, AntreaAgentInfo.
    pub kube: Arc<dyn api::ApiClient>,
    /// antrea-controller (`antreaClientConnection.kubeconfig`): controlplane watches, statuses,
    /// stats.
    pub controller: Arc<dyn api::ApiClient>,
}

impl std::fmt::Debug for ClusterClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterClients")
            .field("kube", &self.kube.describe())
            .field("controller", &self.controller.describe())
            .finish()
    }
}
