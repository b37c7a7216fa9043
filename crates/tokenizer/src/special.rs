//! Splitting text on special-token strings before segmentation.
//!
//! Design: llama.cpp's rule is "for each special token, longest text first, split every
//! remaining text fragment at each left-to-right occurrence". That order is observable (with
//! specials `ab` and `bcd`, `abcd` splits as `a` + `bcd`, not `ab` + `cd`), so it is kept
//! exactly. Running it over all ~6k special tokens of a large vocabulary would scan the text
//! thousands of times, so a byte trie first finds which special texts occur in the input at
//! all; only those (usually none or a handful) run the splitting passes.
//!
//! Which tokens take part: user-defined tokens always (llama.cpp and HF split them even when
//! special parsing is off); control and unknown tokens only with `parse_special`.
//!
//! Invariant: fragments partition the input in order; text fragments are never empty.

use crate::vocab::{Attr, Compiled};

/// A piece of input after special-token splitting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'t> {
    /// Ordinary text still to be segmented.
    Text(&'t str),
    /// A special token matched verbatim.
    Token(u32),
}

/// One trie node: children sorted by byte, and the token ending here, if any.
#[derive(Debug, Default)]
struct Node {
    children: Vec<(u8, u32)>,
    token: Option<u32>,
}

/// Special tokens ordered for splitting, plus a trie over their texts.
#[derive(Debug)]
pub(crate) struct SpecialMatcher {
    nodes: Vec<Node>,
    /// Position of each special id in the split order (longest text first, then lower id).
    order: std::collections::HashMap<u32, usize>,
}

impl SpecialMatcher {
    pub fn new(vocab: &Compiled) -> Self {
        let special_attrs = [Attr::CONTROL, Attr::USER_DEFINED, Attr::UNKNOWN];
        let mut ids: Vec<u32> = (0..vocab.len() as u32)
            .filter(|&id| special_attrs.iter().any(|&a| vocab.attr(id).has(a)))
            .collect();
        ids.sort_by_key(|&id| (std::cmp::Reverse(vocab.pieces[id as usize].len()), id));

        let mut nodes = vec![Node::default()];
        for &id in &ids {
            let mut at = 0usize;
            for &b in vocab.pieces[id as usize].as_bytes() {
                at = match nodes[at].children.binary_search_by_key(&b, |&(c, _)| c) {
                    Ok(i) => nodes[at].children[i].1 as usize,
                    Err(i) => {
                        let next = nodes.len();
                        nodes[at].children.insert(i, (b, next as u32));
                        nodes.push(Node::default());
                        next
                    }
                };
            }
            nodes[at].token = Some(id);
        }
        let order = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        Self { nodes, order }
    }

    /// Special ids whose text occurs anywhere in `text`, in split order.
    fn occurring(&self, text: &str, vocab: &Compiled, parse_special: bool) -> Vec<u32> {
        let bytes = text.as_bytes();
        let mut found: Vec<u32> = Vec::new();
        for start in 0..bytes.len() {
            let mut at = 0usize;
            for &b in &bytes[start..] {
                match self.nodes[at]
                    .children
                    .binary_search_by_key(&b, |&(c, _)| c)
                {
                    Ok(i) => at = self.nodes[at].children[i].1 as usize,
                    Err(_) => break,
                }
                if let Some(id) = self.nodes[at].token {
                    if !found.contains(&id) && takes_part(vocab.attr(id), parse_special) {
                        found.push(id);
                    }
                }
            }
        }
        found.sort_by_key(|id| self.order.get(id).copied().unwrap_or(usize::MAX));
        found
    }

    /// Splits `text` into text fragments and special tokens, llama.cpp's way.
    pub fn partition<'t>(
        &self,
        text: &'t str,
        vocab: &Compiled,
        parse_special: bool,
    ) -> Vec<Fragment<'t>> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut fragments = vec![Fragment::Text(text)];
        for id in self.occurring(text, vocab, parse_special) {
            let needle = vocab.pieces[id as usize].as_str();
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                match fragment {
                    Fragment::Text(mut rest) => {
                        while let Some(at) = rest.find(needle) {
                            if at > 0 {
                                next.push(Fragment::Text(&rest[..at]));
                            }
                            next.push(Fragment::Token(id));
                            rest = &rest[at + needle.len()..];
                        }
                        if !rest.is_empty() {
                            next.push(Fragment::Text(rest));
                        }
                    }
                    token => next.push(token),
                }
            }
            fragments = next;
        }
        fragments
    }
}

fn takes_part(attr: Attr, parse_special: bool) -> bool {
    if attr.has(Attr::CONTROL) || attr.has(Attr::UNKNOWN) {
        parse_special
    } else {
        attr.has(Attr::USER_DEFINED)
    }
}
