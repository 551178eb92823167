//! `antrea-agent.conf` for external nodes: parsing, defaults and validation (placeholder; being
//! written).
