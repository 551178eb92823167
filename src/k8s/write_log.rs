//! The record of one kind of write to the Kubernetes API (AntreaAgentInfo, NetworkPolicyStatus,
//! NodeStatsSummary): when it was last tried and last worked, what it did, its current error (with
//! its kind). The reporter keeps one per kind and shows them in its status; each new error is
//! logged once.

use chrono::Utc;
use serde::Serialize;
use tracing::{debug, info, warn};

use super::agent_info;
use crate::error_kind::StatusError;

/// The outcome of one kind of write, for reports; logs each new error once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteLog {
    /// RFC 3339.
    pub last_attempt: Option<String>,
    pub last_success: Option<String>,
    /// What the last success did (e.g. `partial`, `full`, `baseline`, `posted`).
    pub last_result: Option<String>,
    /// The current error; cleared by the next success.
    pub last_error: Option<StatusError>,
    pub successes: u64,
    pub failures: u64,
}

impl WriteLog {
    /// Records a success of `what` (logged when it is the first, or ends an error).
    pub fn ok(&mut self, what: &str, result: impl Into<String>) {
        let now = agent_info::rfc3339(Utc::now());
        let result = result.into();
        if let Some(e) = self.last_error.take() {
            info!("{what}: working again ({result}; last error: {})", e.message);
        } else if self.successes == 0 {
            info!("{what}: first write done ({result})");
        }
        self.last_attempt = Some(now.clone());
        self.last_success = Some(now);
        self.last_result = Some(result);
        self.successes += 1;
    }

    /// Records a failure of `what` (logged as a warning when the error is new).
    pub fn err(&mut self, what: &str, error: StatusError) {
        if self.last_error.as_ref() == Some(&error) {
            debug!("{what}: {}", error.message);
        } else {
            warn!("{what}: {}", error.message);
        }
        self.last_attempt = Some(agent_info::rfc3339(Utc::now()));
        self.last_error = Some(error);
        self.failures += 1;
    }
}
