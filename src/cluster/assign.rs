//! The assignment rule: which live node scans which shard. Pure functions of
//! (live nodes, shards, mode, current assignment), run by the leader.
//!
//! - active-standby: every shard to the leader; the other nodes stand by.
//! - multi-active: shards spread evenly (loads differ by at most one), moving
//!   as few shards as possible: a shard stays with its owner while that
//!   owner is live and not above its fair share; orphaned shards and the
//!   excess of overloaded nodes go to the least loaded nodes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Every shard on the leader; the other nodes stand by.
    ActiveStandby,
    /// Shards spread evenly over the live nodes.
    MultiActive,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ActiveStandby => "active-standby",
            Mode::MultiActive => "multi-active",
        }
    }
}

/// Owner of each shard (index = shard); `None` for a shard nobody is given.
pub type Assignment = Vec<Option<String>>;

/// The assignment for `live` nodes (sorted or not) given the current one.
pub fn assign(
    mode: Mode,
    live: &[String],
    leader: &str,
    shards: u32,
    current: &Assignment,
) -> Assignment {
    match mode {
        Mode::ActiveStandby => vec![Some(leader.to_string()); shards as usize],
        Mode::MultiActive => spread(live, shards, current),
    }
}

/// Spreads shards evenly over `live`, keeping every shard it can where it is.
pub fn spread(live: &[String], shards: u32, current: &Assignment) -> Assignment {
    let n = shards as usize;
    if live.is_empty() {
        return vec![None; n];
    }
    let mut nodes: Vec<&String> = live.iter().collect();
    nodes.sort();
    nodes.dedup();
    // Fair shares: `base` each, one more for the first `extra` nodes by
    // current load (so the nodes that hold more keep more).
    let base = n / nodes.len();
    let extra = n % nodes.len();
    let mut load: BTreeMap<&str, usize> = nodes.iter().map(|s| (s.as_str(), 0)).collect();
    for owner in current.iter().take(n).flatten() {
        if let Some(l) = load.get_mut(owner.as_str()) {
            *l += 1;
        }
    }
    let mut by_load: Vec<&str> = nodes.iter().map(|s| s.as_str()).collect();
    by_load.sort_by(|a, b| load[b].cmp(&load[a]).then(a.cmp(b)));
    let quota: BTreeMap<&str, usize> = by_load
        .iter()
        .enumerate()
        .map(|(i, s)| (*s, base + usize::from(i < extra)))
        .collect();

    let mut out: Assignment = vec![None; n];
    let mut kept: BTreeMap<&str, usize> = nodes.iter().map(|s| (s.as_str(), 0)).collect();
    let mut free = Vec::new();
    for (shard, slot) in out.iter_mut().enumerate() {
        match current.get(shard).and_then(|o| o.as_deref()) {
            Some(owner) if kept.get(owner).is_some_and(|k| *k < quota[owner]) => {
                *kept.get_mut(owner).unwrap() += 1;
                *slot = Some(owner.to_string());
            }
            _ => free.push(shard),
        }
    }
    for shard in free {
        let (node, k) = kept
            .iter_mut()
            .filter(|(node, k)| **k < quota[**node])
            .min_by(|a, b| (*a.1).cmp(&*b.1).then(a.0.cmp(b.0)))
            .expect("quotas add up to the number of shards");
        *k += 1;
        out[shard] = Some(node.to_string());
    }
    out
}

/// Moves one shard to `to` (an operator's choice).
pub fn move_shard(current: &Assignment, shard: u32, to: &str) -> Assignment {
    let mut out = current.clone();
    if let Some(slot) = out.get_mut(shard as usize) {
        *slot = Some(to.to_string());
    }
    out
}

/// How many shards change owner between two assignments.
pub fn moves(a: &Assignment, b: &Assignment) -> usize {
    a.iter().zip(b).filter(|(x, y)| x != y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn loads(a: &Assignment) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for o in a.iter().flatten() {
            *m.entry(o.clone()).or_default() += 1;
        }
        m
    }

    fn even(a: &Assignment, live: &[String]) -> bool {
        let l = loads(a);
        let counts: Vec<usize> = live
            .iter()
            .map(|n| l.get(n).copied().unwrap_or(0))
            .collect();
        a.iter()
            .all(|o| o.as_ref().is_some_and(|o| live.contains(o)))
            && counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1
    }

    #[test]
    fn active_standby_gives_everything_to_the_leader() {
        let a = assign(Mode::ActiveStandby, &names(&["a", "b"]), "b", 4, &vec![]);
        assert_eq!(a, vec![Some("b".to_string()); 4]);
    }

    #[test]
    fn a_first_spread_is_even() {
        let live = names(&["a", "b", "c"]);
        let a = spread(&live, 8, &vec![None; 8]);
        assert!(even(&a, &live), "{a:?}");
    }

    #[test]
    fn a_dead_nodes_shards_go_to_the_others_and_nothing_else_moves() {
        let live = names(&["a", "b", "c"]);
        let before = spread(&live, 9, &vec![None; 9]);
        let after = spread(&names(&["a", "c"]), 9, &before);
        assert!(even(&after, &names(&["a", "c"])), "{after:?}");
        for (b, a) in before.iter().zip(&after) {
            if b.as_deref() != Some("b") {
                assert_eq!(b, a, "a shard of a live node moved");
            }
        }
    }

    #[test]
    fn a_returning_node_gets_its_fair_share_with_fewest_moves() {
        let all = vec![Some("a".to_string()); 4]
            .into_iter()
            .chain(vec![Some("c".to_string()); 4])
            .collect::<Assignment>();
        let live = names(&["a", "b", "c"]);
        let after = spread(&live, 8, &all);
        assert!(even(&after, &live), "{after:?}");
        // b needs 2 (or 3); only those move.
        let l = loads(&after);
        assert_eq!(moves(&all, &after), l["b"]);
    }

    #[test]
    fn spreading_an_even_assignment_moves_nothing() {
        let live = names(&["x", "y"]);
        let a = spread(&live, 8, &vec![None; 8]);
        assert_eq!(spread(&live, 8, &a), a);
        let b = spread(&live, 7, &vec![None; 7]);
        assert_eq!(spread(&live, 7, &b), b);
    }

    #[test]
    fn unknown_owners_and_no_live_nodes() {
        let cur = vec![Some("gone".to_string()); 3];
        let live = names(&["a"]);
        assert_eq!(spread(&live, 3, &cur), vec![Some("a".to_string()); 3]);
        assert_eq!(spread(&[], 3, &cur), vec![None; 3]);
    }

    #[test]
    fn more_nodes_than_shards() {
        let live = names(&["a", "b", "c", "d"]);
        let a = spread(&live, 2, &vec![None; 2]);
        assert!(a.iter().all(Option::is_some));
        assert_ne!(a[0], a[1]);
    }

    #[test]
    fn move_changes_one_shard() {
        let a = vec![Some("a".to_string()); 3];
        let b = move_shard(&a, 1, "b");
        assert_eq!(moves(&a, &b), 1);
        assert_eq!(b[1].as_deref(), Some("b"));
    }
}
