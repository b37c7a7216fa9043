//! API-key comparison in constant time.
//!
//! The comparison touches every byte of both strings whatever they hold, so its duration tells
//! an attacker only the lengths, never how long a matching prefix was.

/// Whether `given` equals `expected`, in time independent of where they differ.
pub fn bearer_matches(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= u64::from(x ^ y);
    }
    // Keep the optimizer from turning the loop into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_match_and_any_difference_does_not() {
        assert!(bearer_matches("sk-abc", "sk-abc"));
        assert!(!bearer_matches("sk-abd", "sk-abc"));
        assert!(!bearer_matches("sk-ab", "sk-abc"));
        assert!(!bearer_matches("sk-abc\0", "sk-abc"));
        assert!(!bearer_matches("", "sk-abc"));
    }
}
