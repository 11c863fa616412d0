//! Small helpers for messages people read.

/// `n` and the noun in the right number: `count(1, "step", "steps")` is "1 step".
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn one_is_singular_and_zero_and_many_are_plural() {
        assert_eq!(count(0, "step", "steps"), "0 steps");
        assert_eq!(count(1, "step", "steps"), "1 step");
        assert_eq!(count(2, "property", "properties"), "2 properties");
    }
}
