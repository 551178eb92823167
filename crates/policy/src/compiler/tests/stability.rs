//! Stability across compilations: the same rule set gives the same flows in any order, other
//! rules keep their ids and flows when rules come and go, held ids are bounded, squeezed
//! priorities move and are reported, and incremental updates equal a full compilation.

use super::golden::{g17_rule, g18_rule, G17};
use super::*;

// === stability ===

#[test]
fn matches_are_built_normalized() {
    // The compiler builds matches the way OVS stores them, so a flow's identity here is its
    // identity in the switch (no separate normalization pass).
    let mut rules = many_rules(200);
    rules.push(rule(
        "any",
        Direction::Out,
        0,
        RuleAction::Allow,
        250,
        1.0,
        vec![ip("10.0.0.5/32")],
        vec![ip("0.0.0.0/0"), ip("::/0"), ip("10.1.2.3/8")],
        Some(vec![Service::range(Protocol::Udp, 0, 65535)]),
    ));
    let out = compile(&rules, 1, CompileOptions::default());
    for (key, f) in &out.flows {
        assert_eq!(normalize_match(&f.matches), f.matches, "{f:?}");
        assert_eq!(key, &f.key());
    }
    // build_flows returns flows sorted by identity, each identity once.
    let resolved_rules: Vec<ResolvedRule<'_>> = rules
        .iter()
        .filter_map(|r| {
            let info = out.conjunctions.values().find(|i| i.rule_id == r.id)?;
            Some(resolved(r, info.conj_id, info.table, info.priority))
        })
        .collect();
    let flows = build_flows(&resolved_rules, 1, &CompileOptions::default());
    assert!(flows.windows(2).all(|w| w[0].key() < w[1].key()));
    assert_eq!(flows, out.flows.values().cloned().collect::<Vec<_>>());
    let lines = rendered_set(&out.flows);
    assert!(lines.contains("cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14900,udp actions=conjunction(2,3/3)"), "{lines:#?}");
    assert!(lines.contains("cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14900,ip,nw_dst=10.0.0.0/8 actions=conjunction(2,2/3)"), "{lines:#?}");
}

#[test]
fn same_rule_set_same_output_in_any_order() {
    let rules = many_rules(60);
    let a = compile(&rules, 3, CompileOptions::default());
    let mut reversed = rules.clone();
    reversed.reverse();
    let b = compile(&reversed, 3, CompileOptions::default());
    assert_eq!(a.flows, b.flows);
    assert_eq!(a.conjunctions, b.conjunctions);
    assert!(a.skipped.is_empty());
    assert!(a.priority_updates.is_empty());
    // Recompiling the same set with the same compiler changes nothing.
    let mut c = Compiler::new(CompileOptions::default());
    let first = c.compile(&rules, 3);
    let second = c.compile(&reversed, 3);
    assert_eq!(first.flows, second.flows);
    assert_eq!(first.flows, a.flows);
}

#[test]
fn adding_and_removing_rules_leaves_the_others_alone() {
    let rules = many_rules(40);
    let mut c = Compiler::new(CompileOptions::default());
    let before = c.compile(&rules, 1);

    // A new policy (5 rules) in the middle of the precedence order.
    let mut more = rules.clone();
    for i in 0..5 {
        let mut r = rule(
            "new",
            Direction::In,
            i,
            RuleAction::Drop,
            250,
            3.5,
            vec![ip("1.2.3.4/32")],
            vec![Peer::OfPort(3)],
            None,
        );
        r.max_rule_priority = 4;
        more.push(r);
    }
    let after = c.compile(&more, 1);
    assert!(after.skipped.is_empty());
    assert!(after.priority_updates.is_empty());
    // Every earlier flow is still there, unchanged, except shared match flows that gained the
    // new rules' conjunction actions.
    let new_ids: BTreeSet<u32> = after
        .conjunctions
        .values()
        .filter(|c| c.policy.name == "new")
        .map(|c| c.conj_id)
        .collect();
    assert_eq!(new_ids.len(), 5);
    for (key, flow) in &before.flows {
        let now = after.flows.get(key).expect("earlier flow kept");
        if now != flow {
            let mut stripped = now.clone();
            stripped
                .actions
                .retain(|a| !matches!(a, Action::Conjunction { id, .. } if new_ids.contains(id)));
            assert_eq!(&stripped, flow);
        }
    }
    for (id, info) in &before.conjunctions {
        assert_eq!(after.conjunctions.get(id), Some(info));
    }
    // The new policy sits between policy priorities 3 and 4, in precedence order.
    let prio = |name: &str, idx: i32| {
        after
            .conjunctions
            .values()
            .find(|c| c.policy.name == name && c.rule_id.index == idx)
            .map(|c| c.priority)
            .expect("rule")
    };
    assert!(prio("p3", 3) > prio("new", 0));
    assert!(prio("new", 0) > prio("new", 4));
    assert!(prio("new", 4) > prio("p4", 0));

    // Removing it again gives back exactly the first flows; its ids are held, then reclaimed.
    let back = c.compile(&rules, 1);
    assert_eq!(back.flows, before.flows);
    for id in &new_ids {
        assert!(
            c.conjunction(*id).is_some(),
            "released conjunction {id} still known"
        );
    }
    assert_eq!(back.released.keys().copied().collect::<BTreeSet<u32>>(), new_ids);
    // A removed rule that comes back before reclaim gets its id back.
    let again = c.compile(&more, 1);
    assert_eq!(again.flows, after.flows);
    let back = c.compile(&rules, 1);
    assert_eq!(back.flows, before.flows);
    c.reclaim_released_ids();
    for id in &new_ids {
        assert!(c.conjunction(*id).is_none());
    }
    let mut other = rules.clone();
    other.push(rule(
        "other",
        Direction::In,
        0,
        RuleAction::Allow,
        250,
        9.0,
        vec![],
        vec![],
        None,
    ));
    let out = c.compile(&other, 1);
    let other_id = out
        .conjunctions
        .values()
        .find(|c| c.policy.name == "other")
        .map(|c| c.conj_id);
    assert_eq!(other_id, new_ids.iter().next().copied(), "lowest free id reused");
}

#[test]
fn held_ids_are_bounded() {
    let mut c = Compiler::new(CompileOptions::default());
    let mk = |name: String| {
        rule(
            &name,
            Direction::In,
            0,
            RuleAction::Allow,
            250,
            1.0,
            vec![],
            vec![],
            None,
        )
    };
    // Replace the whole rule set again and again without reclaiming: removed ids are held up
    // to the bound, then the oldest are reused.
    let batch = MAX_HELD_IDS / 2 + 10;
    let first_gen = FIRST_CONJ_ID..FIRST_CONJ_ID + batch as u32;
    let mut last = CompileOutput::default();
    for gen in 0..4 {
        let rules: Vec<CompiledRuleInput> = (0..batch).map(|i| mk(format!("g{gen}-{i}"))).collect();
        last = c.compile(&rules, 1);
        assert!(last.released.len() <= MAX_HELD_IDS, "generation {gen}");
    }
    assert_eq!(last.released.len(), MAX_HELD_IDS);
    // Generation 3 took the first generation's ids that were reclaimed at the bound.
    assert!(last.conjunctions.keys().any(|id| first_gen.contains(id)));
    assert!(last.released.keys().all(|id| !first_gen.contains(id)));
}

#[test]
fn squeezed_priorities_move_and_are_reported() {
    // Baseline table: 171 slots. Fill the policy-priority gap between two policies so a new
    // policy between them forces neighbours to move.
    let mk = |name: &str, pp: f64, n: i32| -> Vec<CompiledRuleInput> {
        (0..n)
            .map(|i| {
                let mut r = rule(
                    name,
                    Direction::In,
                    i,
                    RuleAction::Allow,
                    BASELINE_TIER_PRIORITY,
                    pp,
                    vec![],
                    vec![],
                    None,
                );
                r.max_rule_priority = n - 1;
                r
            })
            .collect()
    };
    let mut rules = mk("a", 1.0, 3);
    rules.extend(mk("b", 1.2, 3));
    let mut c = Compiler::new(CompileOptions::default());
    let first = c.compile(&rules, 1);
    // Baseline guesses 180 - 10*pp - rule: b (166..=168) is placed first, then a, whose guesses
    // collide with b, goes in the middle of the free space above (173..=175).
    let first_prios: BTreeMap<(String, i32), u16> = first
        .conjunctions
        .values()
        .map(|i| ((i.policy.name.clone(), i.rule_id.index), i.priority))
        .collect();
    let want: BTreeMap<(String, i32), u16> = [
        ("a", 0, 175),
        ("a", 1, 174),
        ("a", 2, 173),
        ("b", 0, 168),
        ("b", 1, 167),
        ("b", 2, 166),
    ]
    .into_iter()
    .map(|(n, i, o)| ((n.to_string(), i), o))
    .collect();
    assert_eq!(first_prios, want);
    // Six rules between them do not fit the four free slots: b moves down.
    rules.extend(mk("mid", 1.1, 6));
    let second = c.compile(&rules, 1);
    assert!(second.skipped.is_empty());
    let order: Vec<(String, i32, u16)> = second
        .conjunctions
        .values()
        .map(|i| (i.policy.name.clone(), i.rule_id.index, i.priority))
        .collect();
    let p = |n: &str, i: i32| {
        order
            .iter()
            .find(|o| o.0 == n && o.1 == i)
            .map(|o| o.2)
            .expect("rule")
    };
    assert!(p("a", 2) > p("mid", 0));
    assert!(p("mid", 5) > p("b", 0));
    let all: BTreeSet<u16> = order.iter().map(|o| o.2).collect();
    assert_eq!(all.len(), 12, "distinct priorities");
    // Upstream's minimum-cost window: b shifts down by two, a stays.
    let moves = second
        .priority_updates
        .get(&table::INGRESS_DEFAULT_RULE)
        .cloned()
        .unwrap_or_default();
    assert_eq!(moves, [(166, 164), (167, 165), (168, 166)].into_iter().collect());
    assert_eq!(
        (p("b", 2), p("b", 0), p("mid", 5), p("mid", 0), p("a", 2)),
        (164, 166, 167, 172, 173)
    );
}

#[test]
fn duplicates_and_k8s_rules_are_skipped() {
    let r = g17_rule();
    let mut k8s = g18_rule(false);
    k8s.policy.policy_type = PolicyType::K8sNetworkPolicy;
    let out = compile(
        &[r.clone(), r.clone(), k8s.clone()],
        1,
        CompileOptions::upstream(),
    );
    assert_eq!(out.conjunctions.len(), 1);
    let reasons: Vec<(&RuleId, &CompileError)> = out.skipped.iter().map(|s| (&s.id, &s.reason)).collect();
    assert_eq!(
        reasons,
        vec![
            (&k8s.id, &CompileError::NotAntreaNative),
            (&r.id, &CompileError::DuplicateRule)
        ]
    );
    assert_eq!(rendered_set(&out.flows), ovs_text(G17));
}

#[test]
fn priority_overflow_skips_only_the_rules_that_do_not_fit() {
    // 171 baseline slots; a 200-rule policy does not fit, a 3-rule one does.
    let mut rules: Vec<CompiledRuleInput> = (0..200)
        .map(|i| {
            rule(
                "big",
                Direction::In,
                i,
                RuleAction::Allow,
                BASELINE_TIER_PRIORITY,
                1.0,
                vec![],
                vec![],
                None,
            )
        })
        .collect();
    rules.extend((0..3).map(|i| {
        rule(
            "small",
            Direction::In,
            i,
            RuleAction::Allow,
            BASELINE_TIER_PRIORITY,
            2.0,
            vec![],
            vec![],
            None,
        )
    }));
    let out = compile(&rules, 1, CompileOptions::default());
    assert_eq!(out.conjunctions.len(), 3);
    assert_eq!(out.skipped.len(), 200);
    assert!(out
        .skipped
        .iter()
        .all(|s| matches!(s.reason, CompileError::Priority(PriorityError::Overflow { .. }))));
}

/// Prints how long 10,000 rules take to compile (no assertion on time).
#[test]
fn ten_thousand_rules_compile_time() {
    let rules = many_rules(10_000);
    let start = Instant::now();
    let out = compile(&rules, 1, CompileOptions::default());
    let elapsed = start.elapsed();
    println!(
        "compiled {} rules into {} flows in {:?} ({} skipped)",
        rules.len(),
        out.flows.len(),
        elapsed,
        out.skipped.len()
    );
    assert!(out.skipped.is_empty());
    assert_eq!(out.conjunctions.len(), 10_000);
}

/// Many policies with distinct priorities in one tier, arriving one policy at a time after a
/// first compile with one rule (so the tables are not empty and no batch placement applies),
/// exhaust what upstream's registration can place (found by the end-to-end bench); the compact
/// fallback places them all incrementally, and `compile_or_rebuild` needs no rebuild.
#[test]
fn rules_that_upstream_cannot_place_incrementally_are_placed_compactly() {
    let rules: Vec<CompiledRuleInput> = many_rules(N_LATE)
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.policy_priority = (i / 5 + 1) as f64;
            r
        })
        .collect();
    // One-at-a-time registration (upstream's) runs out of room for this set; the compact
    // fallback places every rule without starting over.
    let mut plain = Compiler::new(CompileOptions::default());
    assert!(plain.compile(&rules[..1], 1).skipped.is_empty());
    let late = plain.compile(&rules, 1);
    assert!(
        late.skipped.is_empty(),
        "every rule placed: {:?}",
        late.skipped.first()
    );
    assert_eq!(late.conjunctions.len(), N_LATE);
    let mut rebuilding = Compiler::new(CompileOptions::default());
    assert!(rebuilding.compile_or_rebuild(&rules[..1], 1).skipped.is_empty());
    let out = rebuilding.compile_or_rebuild(&rules, 1);
    assert!(out.skipped.is_empty());
    assert_eq!(out.flows, late.flows, "no rebuild was needed");
}

/// Large enough that one-at-a-time registration runs out of room in one tier.
const N_LATE: usize = 10_000;

/// Applies flow_mods to a flow set the way the switch does (ADD replaces by identity).
fn apply_mods(installed: &mut FlowSet, mods: Vec<FlowMod>) {
    for m in mods {
        match m.command {
            FlowModCommand::Add => {
                installed.insert(m.flow.key(), m.flow);
            }
            FlowModCommand::DeleteStrict => {
                assert!(
                    installed.remove(&m.flow.key()).is_some(),
                    "delete of a flow that is not installed: {:?}",
                    m.flow
                );
            }
            other => panic!("unexpected flow_mod {other:?}"),
        }
    }
}

/// One incremental step: the delta applied to what was installed gives exactly the complete
/// flow set of the new rule set, and the per-table counts follow. Returns the number of mods.
///
/// The mods are applied in the order they are streamed into the bundle (chunk by chunk, with
/// a chunk size that varies from step to step, down to one rule per chunk), so the order
/// across chunks is checked as the switch executes it.
fn step(c: &mut Compiler, installed: &mut FlowSet, rules: &[Arc<CompiledRuleInput>]) -> usize {
    static STEPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let size = [1, 2, 3, 7, CHUNK_RULES][STEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 5];
    let (up, delta) = c.update_delta(rules, None, 1, true);
    assert!(!up.full);
    let mut chunks = delta.into_chunks(size);
    let mods: Vec<FlowMod> = chunks.by_ref().flatten().collect();
    c.adjust_flow_counts(chunks.count_changes());
    let n = mods.len();
    apply_mods(installed, mods);
    let counts = c.flow_counts().clone();
    let want = c.flows(1);
    assert_eq!(installed.len(), want.len());
    assert!(
        *installed == want,
        "the delta does not lead to the complete flow set"
    );
    let mut have: BTreeMap<u8, usize> = BTreeMap::new();
    for k in installed.keys() {
        *have.entry(k.table).or_insert(0) += 1;
    }
    counts.iter().filter(|(_, &n)| n == 0).for_each(|(t, _)| {
        have.entry(*t).or_insert(0);
    });
    assert_eq!(counts, have, "flow counts per table");
    n
}

fn arcs(rules: &[CompiledRuleInput]) -> Vec<Arc<CompiledRuleInput>> {
    let mut v: Vec<Arc<CompiledRuleInput>> = rules.iter().cloned().map(Arc::new).collect();
    v.sort_by(|a, b| a.id.cmp(&b.id));
    v
}

#[test]
fn incremental_updates_equal_full_compilation() {
    let mut c = Compiler::new(CompileOptions::default());
    let mut installed = FlowSet::new();
    // As the flow installer: an empty first view, then every rule at once.
    assert_eq!(step(&mut c, &mut installed, &[]), 0);
    let mut rules = arcs(&many_rules(60));
    let n = step(&mut c, &mut installed, &rules);
    assert_eq!(n, installed.len(), "all adds");
    // The same view again, and the same rules in new allocations: nothing to do.
    assert_eq!(step(&mut c, &mut installed, &rules), 0);
    assert_eq!(step(&mut c, &mut installed, &arcs(&many_rules(60))), 0);
    // Keep the compiler's allocations from here on: pointer comparison is the fast path.
    rules = arcs(&many_rules(60));
    step(&mut c, &mut installed, &rules);

    // A twin of policy p3 (same tier and policy priority, so same OpenFlow priorities): its
    // rules share match flows with p3's, which gain and then lose conjunction actions.
    let twin: Vec<CompiledRuleInput> = many_rules(60)
        .into_iter()
        .filter(|r| r.policy.name == "p3")
        .map(|mut r| {
            r.id.policy_uid = "uid-twin".into();
            r.policy = anp("twin");
            r
        })
        .collect();
    let mut with_twin = rules.clone();
    with_twin.extend(arcs(&twin));
    with_twin.sort_by(|a, b| a.id.cmp(&b.id));
    let n = step(&mut c, &mut installed, &with_twin);
    assert!(
        n > 0 && n < 150,
        "{n} mods for 5 rules sharing flows, of {}",
        installed.len()
    );
    assert!(installed.values().any(|f| f
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Conjunction { .. }))
        .count()
        == 2));
    let n = step(&mut c, &mut installed, &rules);
    assert!(n > 0 && n < 150, "{n} mods");

    // One rule's peers change: only its flows.
    let mut changed = rules.clone();
    let mut r = (*changed[7]).clone();
    r.from.push(ip("172.16.0.0/12"));
    changed[7] = Arc::new(r);
    let n = step(&mut c, &mut installed, &changed);
    assert!((1..=4).contains(&n), "{n} mods for one new peer");

    // Policy priorities change (the rules move), some rules go, some come: a pseudo-random walk.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    let mut current: Vec<CompiledRuleInput> = changed.iter().map(|r| (**r).clone()).collect();
    for round in 0..40 {
        match next(4) {
            0 if !current.is_empty() => {
                let i = next(current.len() as u64) as usize;
                current.remove(i);
            }
            1 => {
                let i = next(current.len().max(1) as u64) as usize;
                if let Some(r) = current.get_mut(i) {
                    r.policy_priority = next(12) as f64 / 2.0;
                }
            }
            2 => {
                let i = next(current.len().max(1) as u64) as usize;
                if let Some(r) = current.get_mut(i) {
                    r.to.push(ip(&format!("10.200.{}.0/24", next(4))));
                    r.action = RuleAction::Drop;
                }
            }
            _ => {
                let k = next(100) as usize;
                let mut r = many_rules(60)[k % 60].clone();
                r.id.policy_uid = format!("uid-walk-{k}").into();
                r.policy = anp(&format!("walk-{k}"));
                r.policy_priority = next(12) as f64 / 2.0;
                current.push(r);
            }
        }
        let view = arcs(&current);
        step(&mut c, &mut installed, &view);
        if round % 10 == 9 {
            c.reclaim_released_ids();
        }
    }
    // Back to the start: the same flows as a fresh compiler would have, apart from ids and
    // priorities, which a fresh compiler hands out differently; so compare the counts.
    step(&mut c, &mut installed, &rules);
    assert_eq!(
        installed.len(),
        compile(&many_rules(60), 1, CompileOptions::default()).flows.len()
    );
}

#[test]
fn incremental_updates_follow_squeezed_priorities() {
    // The squeeze of `squeezed_priorities_move_and_are_reported`, through `update`: the rules
    // whose priorities move get their flows rewritten, and nothing else is touched.
    let mk = |name: &str, pp: f64, n: i32| -> Vec<CompiledRuleInput> {
        (0..n)
            .map(|i| {
                let mut r = rule(
                    name,
                    Direction::In,
                    i,
                    RuleAction::Drop,
                    BASELINE_TIER_PRIORITY,
                    pp,
                    vec![ip(&format!("10.0.{i}.0/24"))],
                    vec![Peer::OfPort(3)],
                    None,
                );
                r.max_rule_priority = n - 1;
                r
            })
            .collect()
    };
    let mut rules = mk("a", 1.0, 3);
    rules.extend(mk("b", 1.2, 3));
    let mut c = Compiler::new(CompileOptions::default());
    let mut installed = FlowSet::new();
    step(&mut c, &mut installed, &arcs(&rules));
    rules.extend(mk("mid", 1.1, 6));
    let up = c.clone().update(&arcs(&rules), 1);
    assert_eq!(
        up.priority_updates
            .get(&table::INGRESS_DEFAULT_RULE)
            .map(BTreeMap::len),
        Some(3)
    );
    step(&mut c, &mut installed, &arcs(&rules));
    rules.truncate(6);
    step(&mut c, &mut installed, &arcs(&rules));
}

#[test]
fn published_conjunctions_follow_the_compiler() {
    let mut c = Compiler::new(CompileOptions::default());
    let mut publisher = ConjunctionPublisher::new();
    let rules = arcs(&many_rules(20));
    c.update(&rules, 1);
    assert_eq!(*publisher.publish(&mut c), c.known_conjunctions());
    let mut held = None;
    for n in [15, 18, 10, 20, 20, 3] {
        c.update(&rules[..n], 1);
        let published = publisher.publish(&mut c);
        assert_eq!(*published, c.known_conjunctions(), "{n} rules");
        // A reader that keeps a map forces a copy, and still sees its own version.
        if n == 18 {
            held = Some((published, c.known_conjunctions()));
        }
    }
    c.reclaim_released_ids();
    assert_eq!(*publisher.publish(&mut c), c.known_conjunctions());
    let (kept, then) = held.expect("published at 18");
    assert_eq!(*kept, then);
    // A large incremental change (a fleet arriving after the first sync) makes the spare
    // afresh; the small changes after it still read right.
    let fleet = arcs(&many_rules(1_200));
    for n in [1_200, 1_199, 1_200, 5, 1_100] {
        c.update(&fleet[..n], 1);
        assert_eq!(
            *publisher.publish(&mut c),
            c.known_conjunctions(),
            "{n} of the fleet"
        );
    }
    // A change of 1,024 or more that is a small share of a large map goes through the copy (and
    // makes the spare afresh); a larger share rebuilds the map. Both read right, and the map
    // equals the released ids overlaid with the live ones.
    let large = arcs(&many_rules(4_800));
    for n in [4_800, 3_700, 3_690, 4_800] {
        c.update(&large[..n], 1);
        let published = publisher.publish(&mut c);
        let mut reference: ConjunctionMap = c
            .released
            .iter()
            .map(|(&id, (info, _))| (id, Arc::clone(info)))
            .collect();
        for (&id, info) in &c.live {
            reference.insert(id, Arc::clone(info));
        }
        assert_eq!(c.known_conjunctions(), reference, "{n} of the large fleet");
        assert_eq!(*published, reference, "{n} of the large fleet, published");
    }
}

#[test]
fn priority_users_track_the_last_use_of_each_priority() {
    let id = |uid: &str, index: i32| RuleId {
        policy_uid: uid.into(),
        direction: Direction::Out,
        index,
        services_key: String::new(),
    };
    let p1 = (7u8, Priority::new(250, 1.0, 0));
    let p2 = (7u8, Priority::new(250, 2.0, 0));
    let mut users = PriorityUsers::default();
    users.insert(p1, id("b", 0));
    users.insert(p1, id("a", 3));
    users.insert(p2, id("a", 0));
    assert_eq!(users.of(p1).collect::<Vec<_>>(), [&id("a", 3), &id("b", 0)]);
    assert!(!users.remove_last(p1, &id("a", 3)), "b still uses p1");
    assert!(
        !users.remove_last(p1, &id("zz", 0)),
        "not a user: not the last use either"
    );
    assert!(users.remove_last(p1, &id("b", 0)));
    assert!(!users.is_used(p1));
    assert!(users.is_used(p2), "another priority is untouched");
    assert_eq!(users.of(p2).count(), 1);
}

/// A rule waiting for a priority that is deleted in the same pass as rules whose removal frees
/// room in its table is gone for good: it is not tried again, placed or reported.
#[test]
fn a_deleted_rule_waiting_for_a_priority_does_not_come_back() {
    let baseline = |policy: &str, priority: f64, n: i32| -> Vec<CompiledRuleInput> {
        (0..n)
            .map(|i| {
                rule(
                    policy,
                    Direction::In,
                    i,
                    RuleAction::Allow,
                    BASELINE_TIER_PRIORITY,
                    priority,
                    vec![],
                    vec![],
                    None,
                )
            })
            .collect()
    };
    // 171 baseline slots: "big" (200 rules) does not fit and waits; "small" and "keep" are placed.
    let keep = baseline("keep", 3.0, 1);
    let mut all = baseline("big", 1.0, 200);
    all.extend(baseline("small", 2.0, 3));
    all.extend(keep.clone());
    let mut c = Compiler::new(CompileOptions::default());
    let first = c.update(&arcs(&all), 1);
    assert_eq!(first.skipped.len(), 200, "big waits for a priority");
    assert_eq!(c.rule_count(), 4);
    // "big" and "small" deleted at once: small's priorities are freed in the table big waits in.
    for hinted in [false, true] {
        let mut c = c.clone();
        let view = arcs(&keep);
        let up = if hinted {
            let ids: BTreeSet<RuleId> = all.iter().map(|r| r.id.clone()).collect();
            c.update_or_rebuild_hinted(&view, Some(&ids), 1)
        } else {
            c.update(&view, 1)
        };
        assert!(up.skipped.is_empty(), "hinted {hinted}: {:?}", up.skipped.first());
        assert_eq!(c.rule_count(), 1, "hinted {hinted}: only keep is placed");
        assert_eq!(
            c.flows(1),
            compile(&keep, 1, CompileOptions::default()).flows,
            "hinted {hinted}: the flows of keep alone"
        );
        // And nothing is held for the deleted rules: an empty view leaves no rule and no flow.
        let up = c.update(&[], 1);
        assert!(up.skipped.is_empty());
        assert!(c.flows(1).is_empty());
    }
}
