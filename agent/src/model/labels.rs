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

/// Per-process thread-label assignment: the first `max` distinct names keep
/// their own label, later ones share `other`. Sticky, so that every series'
/// counter only grows (a name never moves between labels).
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
}
