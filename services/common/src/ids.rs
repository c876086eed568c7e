//! Identifier and secret generation.

use std::io::Read;

/// A new identifier with a readable prefix, e.g. `thr_3f2a…` (128 random bits).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// A new secret token: 256 bits from the OS generator, as 64 hex digits.
/// (Two v4 UUIDs gave 244: each fixes 6 bits for its version and variant.)
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("the OS random generator (/dev/urandom) is readable");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two secrets (or their digests) in time independent of where
/// they differ. Lengths are not secret: unequal lengths differ at once.
pub fn same_secret(expected: &[u8], given: &[u8]) -> bool {
    if expected.len() != given.len() {
        return false;
    }
    let diff = expected
        .iter()
        .zip(given)
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_equal_only_when_every_byte_is() {
        assert!(same_secret(b"abcd", b"abcd"));
        assert!(!same_secret(b"abcd", b"abce"));
        assert!(!same_secret(b"abcd", b"xbcd"));
        assert!(!same_secret(b"abcd", b"abc"));
        assert!(!same_secret(b"", b"a"));
    }

    #[test]
    fn secrets_are_256_random_bits() {
        let a = new_secret();
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, new_secret());
        // Every bit position varies: no fixed version/variant nibbles.
        let samples: Vec<Vec<u8>> = (0..64)
            .map(|_| {
                (0..32)
                    .map(|i| u8::from_str_radix(&new_secret()[2 * i..2 * i + 2], 16).unwrap())
                    .collect()
            })
            .collect();
        for byte in 0..32 {
            let ones = samples.iter().fold(0u8, |acc, s| acc | s[byte]);
            let zeros = samples.iter().fold(0u8, |acc, s| acc | !s[byte]);
            assert_eq!((ones, zeros), (0xff, 0xff), "byte {byte} has a fixed bit");
        }
    }
}
