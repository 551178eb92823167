//! Pure policy and pipeline logic: no I/O here.
