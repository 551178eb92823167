//! Antrea's naming conventions that both sides of the API must agree on: today the name
//! antrea-controller gives the ExternalEntity of an ExternalNode's interface. The agent uses it to
//! find its own entities, the API emulator to create them as the controller would.

/// Antrea's ExternalEntity name for an interface: the ExternalNode name when the interface has
/// no name, else `<node>-<first 5 hex digits of sha1(interface name)>`.
pub fn external_entity_name(node_name: &str, interface_name: &str) -> String {
    if interface_name.is_empty() {
        return node_name.to_string();
    }
    let digest = sha1_smol::Sha1::from(interface_name.as_bytes())
        .digest()
        .to_string();
    format!("{node_name}-{}", &digest[..5])
}
