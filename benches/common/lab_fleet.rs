//! The lab pieces shared by the benches that run the agent against a real switch with the
//! 10,000-rule fleet (`fqdn_hold`, `reject_latency`, and the two realize benches for the rule
//! count; the fleet's policy texts are `fleet_files.rs`): a thread in a namespace, swapping the
//! policy directory, the bridge's flow and rule counts, and the probe of OVS's own stalls (the physical
//! limit of anything that waits for ovs-vswitchd's main loop).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use antrea_vm_agent::ovs::openflow::conn::{ConnOptions, OfConnection};
use antrea_vm_agent::ovs::openflow::Switch;

/// The bridge's flow count (`ovs-ofctl dump-aggregate`), or `None` if the switch did not answer.
pub fn flow_count(mgmt_sock: &Path) -> Option<usize> {
    let out = std::process::Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow15", "--timeout=30", "dump-aggregate"])
        .arg(format!("unix:{}", mgmt_sock.display()))
        .output()
        .ok()?;
    // "OFPST_AGGREGATE reply (OF1.5) (xid=0x2): packet_count=0 byte_count=0 flow_count=157000"
    String::from_utf8_lossy(&out.stdout)
        .split("flow_count=")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Barrier round trips on a connection of the probe's own, back to back, until `stop`: every
/// round trip in milliseconds. A barrier is answered by ovs-vswitchd's main loop, the same loop
/// that applies a bundle commit and an NXT_RESUME, so the longest round trip is how long the
/// switch itself could not have resumed any paused packet.
pub fn ovs_stall_probe(mgmt_sock: &Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<f64>> {
    let path = mgmt_sock.to_path_buf();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("probe runtime");
        rt.block_on(async move {
            let opts = ConnOptions {
                // The probe measures stalls: it must survive them.
                echo_timeout: Duration::from_secs(3600),
                request_timeout: Duration::from_secs(3600),
                ..ConnOptions::default()
            };
            let conn = OfConnection::connect(&path, 77, opts)
                .await
                .expect("probe connection");
            let mut rtts = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                conn.barrier().await.expect("probe barrier");
                rtts.push(t.elapsed().as_secs_f64() * 1000.0);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            rtts
        })
    })
}

/// Points the policy directory link `dir` at `to` in one rename (through `<lab_dir>/.policies.new`),
/// so the agent sees the whole new directory at once.
pub fn swap_policy_dir(lab_dir: &Path, dir: &Path, to: &Path) {
    let link = lab_dir.join(".policies.new");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(to, &link).expect("link");
    std::fs::rename(&link, dir).expect("swap the policy dir");
}

/// The distinct conjunction ids of the action flows among `flows` (dump lines; `conj_id=N`,
/// N >= 2: 1 is DNS interception): one per rule installed.
pub fn installed_rules(flows: &[String]) -> usize {
    let ids: BTreeSet<u32> = flows
        .iter()
        .filter_map(|l| l.split("conj_id=").nth(1))
        .filter_map(|v| v.split([',', ' ']).next().and_then(|n| n.parse().ok()))
        .filter(|&c| c >= 2)
        .collect();
    ids.len()
}
