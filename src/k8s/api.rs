//! The seam between the agent and a Kubernetes-style API server (kube-apiserver or
//! antrea-controller): JSON requests and line-delimited watch streams on absolute paths. The real
//! implementation sits on a kube-rs client built from a kubeconfig ([`super::client`]); tests use
//! [`super::fake_api::FakeApi`]. Everything above this trait (watchers, writers) is
//! transport-independent.

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::Value;

/// HTTP methods the agent uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Put,
    Post,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Put => "PUT",
            Method::Post => "POST",
        }
    }
}

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The server answered with an error status (its `Status` reason and message when it sent one).
    #[error("{method} {path}: HTTP {code} {reason}: {message}")]
    Status {
        method: &'static str,
        path: String,
        code: u16,
        reason: String,
        message: String,
    },
    /// Connecting, TLS, or the connection dropped.
    #[error("{method} {path}: {message}")]
    Transport {
        method: &'static str,
        path: String,
        message: String,
    },
    /// The body was not the JSON expected.
    #[error("{method} {path}: bad response body: {message}")]
    Decode {
        method: &'static str,
        path: String,
        message: String,
    },
}

/// The message of the generic 404 for a path no handler serves.
pub const UNSERVED_MESSAGE: &str = "the server could not find the requested resource";

impl ApiError {
    /// Requests go to kube-apiserver (or through it to antrea-controller); a caller that knows
    /// it asked antrea-controller says `antrea_controller` instead.
    pub fn kind(&self) -> crate::error_kind::ErrorKind {
        crate::error_kind::ErrorKind::KubeApi
    }

    /// The HTTP status code, if the server answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }
    /// A 404 for the path itself rather than an object: the server has no handler for this API
    /// group or resource (k8s.io/apiserver's generic answer), e.g. a request sent to the wrong
    /// server, or a CRD that is not installed.
    pub fn is_unserved(&self) -> bool {
        matches!(self, ApiError::Status { code: 404, message, .. }
            if message == UNSERVED_MESSAGE)
    }
}

/// A line-delimited watch body: one JSON text per item (a watch event), or the error that ended it.
pub type WatchLines = BoxStream<'static, Result<String, ApiError>>;

/// A JSON API server reached over one authenticated connection.
#[async_trait]
pub trait ApiClient: Send + Sync {
    /// Sends `method` on `path` (absolute, with its query string) with an optional JSON body and
    /// returns the decoded JSON answer (`Value::Null` for an empty body).
    async fn request(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, ApiError>;
    /// Opens a streaming GET (a watch) on `path` and returns its body split into lines.
    async fn watch(&self, path: &str) -> Result<WatchLines, ApiError>;
    /// The server, for logs (e.g. `https://10.0.0.1:6443`).
    fn describe(&self) -> String;
}
