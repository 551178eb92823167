//! Kubernetes-facing types. For now the ExternalNode CRD (crd.antrea.io/v1alpha1), which the
//! standalone mode also reads from a local file.

pub mod external_node;
