//! Bounded, safe label values for thread names (untrusted text from the target).
use std::collections::HashMap;

/// Longest label value kept, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// The label of threads beyond the per-process bound.
pub const OTHER: &str = "other";

/// A printable, bounded form of a name read from the target: control
/// characters become `?`, the length is capped, an empty name is `unnamed`.
pub fn sanitize(name: &str) -> String {
    let s: String = name.trim_end_matches('\n').chars().map(|c| if c.is_control() { '?' } else { c }).take(MAX_NAME_CHARS).collect();
    if s.trim().is_empty() {
        "unnamed".to_string()
    } else {
        s
    }
}

/// A name without a label takes the place of the labelled name with the least impact only
/// when it has more than `SWAP_FACTOR` times that impact plus `SWAP_MIN_CORES` (hysteresis:
/// two names of about the same load do not trade places at every look).
pub const SWAP_FACTOR: f64 = 2.0;
pub const SWAP_MIN_CORES: f64 = 0.05;
/// Of threads that share a name, the busiest gets a label of its own (`NAME#busiest`) when it is
/// busy at least `SPLIT_MIN_CORES` and `SPLIT_FACTOR` times the busiest of the others...
pub const SPLIT_MIN_CORES: f64 = 0.5;
pub const SPLIT_FACTOR: f64 = 4.0;
/// ... and keeps it while it stays at least half as far above them (`SPLIT_MIN_CORES / 2`, `SPLIT_FACTOR / 2`).
pub const BUSIEST: &str = "#busiest";

/// Per-process thread-label assignment: the first `max` distinct names get their own label,
/// later ones share `other`; `rebalance` then gives the labels to the names with the most
/// impact (running and waiting), with hysteresis. The exporter keeps every series' counter
/// growing when a name moves (a thread's numbers up to the move stay where they were).
#[derive(Debug, Default)]
pub struct LabelBook {
    max: usize,
    assigned: HashMap<String, bool>,
    own: usize,
}

impl LabelBook {
    pub fn new(max: usize) -> Self {
        LabelBook { max, assigned: HashMap::new(), own: 0 }
    }

    /// The name has a label of its own.
    pub fn owns(&self, name: &str) -> bool {
        self.assigned.get(name).copied().unwrap_or(false)
    }

    /// Give the own labels to the names with the most impact (`impact`: cores busy, by name;
    /// a known name not in it has none): while a name without a label has more than
    /// `SWAP_FACTOR` times the impact of the labelled name with the least, plus
    /// `SWAP_MIN_CORES`, they trade places. Returns the names whose label changed.
    pub fn rebalance(&mut self, impact: &HashMap<String, f64>) -> Vec<String> {
        let of = |n: &str| impact.get(n).copied().unwrap_or(0.0);
        let mut changed = vec![];
        for name in impact.keys() {
            self.assigned.entry(name.clone()).or_insert(false);
        }
        for _ in 0..=self.max {
            let top = self.assigned.iter().filter(|(_, own)| !**own).map(|(n, _)| n).max_by(|a, b| of(a).total_cmp(&of(b)).then(b.cmp(a)));
            let Some(top) = top.cloned() else { break };
            if self.own < self.max {
                if of(&top) <= 0.0 {
                    break;
                }
                self.assigned.insert(top.clone(), true);
                self.own += 1;
                changed.push(top);
                continue;
            }
            let low = self.assigned.iter().filter(|(_, own)| **own).map(|(n, _)| n).min_by(|a, b| of(a).total_cmp(&of(b)).then(a.cmp(b)));
            let Some(low) = low.cloned() else { break };
            if of(&top) <= SWAP_FACTOR * of(&low) + SWAP_MIN_CORES {
                break;
            }
            self.assigned.insert(low.clone(), false);
            self.assigned.insert(top.clone(), true);
            changed.extend([low, top]);
        }
        changed
    }

    /// The label for a (sanitized) thread name.
    pub fn label<'a>(&mut self, name: &'a str) -> &'a str {
        let own = match self.assigned.get(name) {
            Some(own) => *own,
            None => {
                let own = self.own < self.max;
                if own {
                    self.own += 1;
                }
                self.assigned.insert(name.to_string(), own);
                own
            }
        };
        if own {
            name
        } else {
            OTHER
        }
    }
}

/// Of threads sharing a name (`loads`: an id and its cores busy), the one to label apart as
/// `NAME#busiest`: the busiest, when it is far busier than the rest (`SPLIT_*`); `current`, the
/// one labelled apart now, keeps it while it stays half as far above them.
pub fn busiest_apart<T: Copy + PartialEq>(loads: &[(T, f64)], current: Option<T>) -> Option<T> {
    if loads.len() < 2 {
        return None;
    }
    let (top, load) = loads.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1))?;
    let rest = loads.iter().filter(|(id, _)| *id != top).map(|(_, l)| *l).fold(0.0, f64::max);
    let (min, factor) = if current == Some(top) { (SPLIT_MIN_CORES / 2.0, SPLIT_FACTOR / 2.0) } else { (SPLIT_MIN_CORES, SPLIT_FACTOR) };
    (load >= min && load >= factor * rest).then_some(top)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_untrusted_names() {
        assert_eq!(sanitize("worker\n"), "worker");
        assert_eq!(sanitize("a\x1b[31mred"), "a?[31mred");
        assert_eq!(sanitize(""), "unnamed");
        assert_eq!(sanitize("  "), "unnamed");
        assert_eq!(sanitize(&"x".repeat(500)).chars().count(), MAX_NAME_CHARS);
        assert_eq!(sanitize("quote\"back\\slash"), "quote\"back\\slash"); // the encoder escapes these
    }

    #[test]
    fn first_names_keep_labels_rest_is_other_and_sticky() {
        let mut b = LabelBook::new(2);
        assert_eq!(b.label("a"), "a");
        assert_eq!(b.label("b"), "b");
        assert_eq!(b.label("c"), OTHER);
        assert_eq!(b.label("a"), "a");
        assert_eq!(b.label("c"), OTHER);
        assert_eq!(b.label("d"), OTHER);
        assert_eq!(b.label("b"), "b");
    }

    #[test]
    fn labels_go_to_the_names_with_the_most_impact_with_hysteresis() {
        let mut b = LabelBook::new(2);
        assert_eq!(b.label("gc-1"), "gc-1");
        assert_eq!(b.label("gc-2"), "gc-2");
        assert_eq!(b.label("processor"), OTHER);
        let impact = |v: &[(&str, f64)]| v.iter().map(|(n, l)| (n.to_string(), *l)).collect::<HashMap<String, f64>>();
        // the busy name takes the place of the idlest labelled one
        let mut changed = b.rebalance(&impact(&[("gc-1", 0.0), ("gc-2", 0.01), ("processor", 0.98)]));
        changed.sort();
        assert_eq!(changed, ["gc-1", "processor"]);
        assert!(b.owns("processor") && b.owns("gc-2") && !b.owns("gc-1"));
        assert_eq!(b.label("gc-1"), OTHER);
        // not twice as busy (plus 0.05 core): nobody moves
        assert!(b.rebalance(&impact(&[("gc-1", 0.06), ("gc-2", 0.01), ("processor", 0.98)])).is_empty());
        // a name that is gone has no impact: the next busy one takes its label
        let mut changed = b.rebalance(&impact(&[("gc-1", 0.3), ("processor", 0.98)]));
        changed.sort();
        assert_eq!(changed, ["gc-1", "gc-2"]);
        // free slots are filled by busy names only, most first
        let mut b = LabelBook::new(3);
        assert_eq!(b.label("a"), "a");
        assert_eq!(b.rebalance(&impact(&[("a", 0.0), ("b", 0.0), ("c", 0.2), ("d", 0.5)])), ["d", "c"]);
        assert!(!b.owns("b"));
    }

    #[test]
    fn the_busiest_of_same_named_threads_is_labelled_apart_while_it_stays_far_busier() {
        let sessions = [(1, 0.02), (2, 0.03), (3, 0.97), (4, 0.01)];
        assert_eq!(busiest_apart(&sessions, None), Some(3));
        // all alike: none
        assert_eq!(busiest_apart(&[(1, 0.3), (2, 0.35)], None), None);
        // 0.4 core, 3x the rest: not enough to be split, enough to stay split
        let lighter = [(1, 0.1), (3, 0.4)];
        assert_eq!(busiest_apart(&lighter, None), None);
        assert_eq!(busiest_apart(&lighter, Some(3)), Some(3));
        // a thread alone has its name's label to itself
        assert_eq!(busiest_apart(&[(3, 1.0)], None), None);
    }
}
