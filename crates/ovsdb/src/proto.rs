//! OVSDB (RFC 7047) data encoding: builders for `transact` operations and conditions, encoders
//! for atoms, sets and maps, and decoders for the values `select` returns.
//!
//! Pure functions over `serde_json::Value`; no I/O. The client composes transactions from these,
//! and the unit tests pin the exact JSON we send.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::OvsdbError;

/// The database every operation targets.
pub const DB: &str = "Open_vSwitch";

// === encoders ===

/// `["uuid", "<uuid>"]`.
pub fn uuid(u: &str) -> Value {
    json!(["uuid", u])
}

/// `["named-uuid", "<name>"]`: a row inserted earlier in the same transaction.
pub fn named_uuid(name: &str) -> Value {
    json!(["named-uuid", name])
}

/// `["set", [...]]`.
pub fn set(items: Vec<Value>) -> Value {
    json!(["set", items])
}

/// The empty set, which is how an absent optional column (`min: 0, max: 1`) is written.
pub fn empty_set() -> Value {
    set(Vec::new())
}

/// `["map", [[k, v], ...]]` from string pairs.
pub fn string_map<'a>(pairs: impl IntoIterator<Item = (&'a String, &'a String)>) -> Value {
    let pairs: Vec<Value> = pairs.into_iter().map(|(k, v)| json!([k, v])).collect();
    json!(["map", pairs])
}

/// A condition `[column, function, value]`.
pub fn cond(column: &str, function: &str, value: Value) -> Value {
    json!([column, function, value])
}

/// `[["name", "==", name]]`.
pub fn where_name(name: &str) -> Value {
    json!([cond("name", "==", json!(name))])
}

/// `[["_uuid", "==", ["uuid", u]]]`.
pub fn where_uuid(u: &str) -> Value {
    json!([cond("_uuid", "==", uuid(u))])
}

// === operations ===

/// `select` of some columns.
pub fn select(table: &str, where_: Value, columns: &[&str]) -> Value {
    json!({"op": "select", "table": table, "where": where_, "columns": columns})
}

/// `insert` of a row, optionally named for later reference in the same transaction.
pub fn insert(table: &str, row: Map<String, Value>, uuid_name: Option<&str>) -> Value {
    let mut op = json!({"op": "insert", "table": table, "row": row});
    if let (Some(n), Some(obj)) = (uuid_name, op.as_object_mut()) {
        obj.insert("uuid-name".to_string(), json!(n));
    }
    op
}

/// `update` of the matching rows.
pub fn update(table: &str, where_: Value, row: Map<String, Value>) -> Value {
    json!({"op": "update", "table": table, "where": where_, "row": row})
}

/// `mutate` of the matching rows; each mutation is `[column, mutator, value]`.
pub fn mutate(table: &str, where_: Value, mutations: Vec<Value>) -> Value {
    json!({"op": "mutate", "table": table, "where": where_, "mutations": mutations})
}

/// `delete` of the matching rows.
pub fn delete(table: &str, where_: Value) -> Value {
    json!({"op": "delete", "table": table, "where": where_})
}

/// `wait` until the selected columns of the matching rows compare `until` (`==`/`!=`) to `rows`.
pub fn wait(
    table: &str,
    where_: Value,
    columns: &[&str],
    until: &str,
    rows: Vec<Value>,
    timeout_ms: u64,
) -> Value {
    json!({
        "op": "wait",
        "timeout": timeout_ms,
        "table": table,
        "where": where_,
        "columns": columns,
        "until": until,
        "rows": rows,
    })
}

/// `comment`: shows up in the ovsdb-server log, handy when debugging.
pub fn comment(text: &str) -> Value {
    json!({"op": "comment", "comment": text})
}

/// The `params` of a `transact` request: the database name, then the operations.
pub fn transact_params(ops: Vec<Value>) -> Value {
    let mut params = Vec::with_capacity(ops.len() + 1);
    params.push(json!(DB));
    params.extend(ops);
    Value::Array(params)
}

/// Checks a `transact` result: it must be an array and no element may carry an `error`.
/// Returns the per-operation results (possibly longer than the ops on a commit error).
pub fn check_transact_result(result: Value, n_ops: usize) -> Result<Vec<Value>, OvsdbError> {
    let Value::Array(results) = result else {
        return Err(OvsdbError::Protocol(format!(
            "transact result is not an array: {result}"
        )));
    };
    for (i, r) in results.iter().enumerate() {
        if let Some(err) = r.get("error") {
            let what = err.as_str().unwrap_or("unknown error");
            let details = r.get("details").and_then(Value::as_str).unwrap_or("");
            let which = if i < n_ops {
                format!("operation {i}")
            } else {
                "commit".to_string()
            };
            let msg = if details.is_empty() {
                format!("{which}: {what}")
            } else {
                format!("{which}: {what}: {details}")
            };
            return Err(if what == "timed out" {
                OvsdbError::Timeout(msg)
            } else {
                OvsdbError::Transaction(msg)
            });
        }
    }
    if results.len() < n_ops {
        return Err(OvsdbError::Protocol(format!(
            "transact returned {} results for {n_ops} operations",
            results.len()
        )));
    }
    Ok(results)
}

// === decoders ===

/// The `rows` array of a `select` result.
pub fn rows(result: &Value) -> Result<&Vec<Value>, OvsdbError> {
    result
        .get("rows")
        .and_then(Value::as_array)
        .ok_or_else(|| OvsdbError::Protocol(format!("select result has no rows: {result}")))
}

/// The `count` of an `update`/`mutate`/`delete` result.
pub fn count(result: &Value) -> Result<u64, OvsdbError> {
    result
        .get("count")
        .and_then(Value::as_u64)
        .ok_or_else(|| OvsdbError::Protocol(format!("result has no count: {result}")))
}

/// The UUID of an `insert` result (`{"uuid": ["uuid", "..."]}`).
pub fn inserted_uuid(result: &Value) -> Result<String, OvsdbError> {
    result
        .get("uuid")
        .and_then(as_uuid)
        .ok_or_else(|| OvsdbError::Protocol(format!("insert result has no uuid: {result}")))
}

/// `["uuid", "x"]` → `x`.
pub fn as_uuid(v: &Value) -> Option<String> {
    match v.as_array().map(Vec::as_slice) {
        Some([Value::String(tag), Value::String(u)]) if tag == "uuid" => Some(u.clone()),
        _ => None,
    }
}

/// The elements of a set column: a bare atom is a one-element set, `["set", [...]]` is a set.
/// (`["uuid", x]` is an atom, not a set.)
pub fn set_elements(v: &Value) -> Vec<&Value> {
    match v.as_array().map(Vec::as_slice) {
        Some([Value::String(tag), Value::Array(items)]) if tag == "set" => items.iter().collect(),
        _ => vec![v],
    }
}

/// UUIDs of a set-of-uuid column.
pub fn uuid_set(v: &Value) -> Vec<String> {
    set_elements(v).into_iter().filter_map(as_uuid).collect()
}

/// An optional string column: `"s"` or `["set", ["s"]]` → `Some`, `["set", []]` → `None`.
pub fn opt_string(v: Option<&Value>) -> Option<String> {
    let v = v?;
    set_elements(v)
        .first()
        .and_then(|e| e.as_str())
        .map(str::to_string)
}

/// A string column (empty string when absent).
pub fn string(v: Option<&Value>) -> String {
    opt_string(v).unwrap_or_default()
}

/// An optional integer column.
pub fn opt_i64(v: Option<&Value>) -> Option<i64> {
    let v = v?;
    set_elements(v).first().and_then(|e| e.as_i64())
}

/// A map column with string keys and values: `["map", [[k, v], ...]]`. Non-string entries are skipped.
pub fn map_strings(v: Option<&Value>) -> BTreeMap<String, String> {
    map_entries(v)
        .into_iter()
        .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string())))
        .collect()
}

/// The raw `[key, value]` pairs of a map column.
pub fn map_entries(v: Option<&Value>) -> Vec<(&Value, &Value)> {
    let Some(Some([Value::String(tag), Value::Array(pairs)])) = v.map(|v| v.as_array().map(Vec::as_slice))
    else {
        return Vec::new();
    };
    if tag != "map" {
        return Vec::new();
    }
    pairs
        .iter()
        .filter_map(|p| match p.as_array().map(Vec::as_slice) {
            Some([k, v]) => Some((k, v)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_optional_and_set_columns() {
        assert_eq!(opt_string(Some(&json!(["set", []]))), None);
        assert_eq!(opt_string(Some(&json!("x"))), Some("x".into()));
        assert_eq!(opt_string(Some(&json!(["set", ["y"]]))), Some("y".into()));
        assert_eq!(opt_string(None), None);
        assert_eq!(opt_i64(Some(&json!(["set", []]))), None);
        assert_eq!(opt_i64(Some(&json!(7))), Some(7));
        assert_eq!(opt_i64(Some(&json!(-1))), Some(-1));
        assert_eq!(uuid_set(&json!(["uuid", "a"])), vec!["a".to_string()]);
        assert_eq!(
            uuid_set(&json!(["set", [["uuid", "a"], ["uuid", "b"]]])),
            vec!["a".to_string(), "b".to_string()]
        );
        assert!(uuid_set(&json!(["set", []])).is_empty());
        let m = map_strings(Some(&json!(["map", [["k", "v"], ["a", "b"]]])));
        assert_eq!(m.get("k").map(String::as_str), Some("v"));
        assert_eq!(m.len(), 2);
        assert!(map_strings(Some(&json!(["map", []]))).is_empty());
    }

    #[test]
    fn transact_errors_are_reported() {
        let ok = json!([{"rows": []}, {"count": 1}]);
        assert_eq!(check_transact_result(ok, 2).map(|r| r.len()).ok(), Some(2));
        let bad = json!([{"count": 1}, {"error": "constraint violation", "details": "dup name"}]);
        let e = check_transact_result(bad, 2)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("operation 1: constraint violation: dup name"), "{e}");
        let commit = json!([{"count": 1}, {"error": "referential integrity violation"}]);
        let e = check_transact_result(commit, 1)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("commit: referential integrity violation"), "{e}");
        let timeout = json!([{"error": "timed out"}]);
        assert!(matches!(
            check_transact_result(timeout, 1),
            Err(OvsdbError::Timeout(_))
        ));
        assert!(matches!(
            check_transact_result(json!({}), 1),
            Err(OvsdbError::Protocol(_))
        ));
        assert!(matches!(
            check_transact_result(json!([]), 1),
            Err(OvsdbError::Protocol(_))
        ));
    }

    #[test]
    fn encodes_ops() {
        let mut row = Map::new();
        row.insert("name".into(), json!("p"));
        assert_eq!(
            insert("Port", row, Some("new_port")),
            json!({"op": "insert", "table": "Port", "row": {"name": "p"}, "uuid-name": "new_port"})
        );
        assert_eq!(
            transact_params(vec![select("Bridge", where_name("br"), &["_uuid"])]),
            json!(["Open_vSwitch", {"op": "select", "table": "Bridge", "where": [["name", "==", "br"]], "columns": ["_uuid"]}])
        );
        let ids: BTreeMap<String, String> = [("a".to_string(), "1".to_string())].into();
        assert_eq!(string_map(&ids), json!(["map", [["a", "1"]]]));
    }
}
