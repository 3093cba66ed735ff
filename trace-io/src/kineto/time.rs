//! Kineto timestamps: decimal microseconds in the JSON text, integer nanoseconds in the model.
//!
//! Kineto writes `ts` and `dur` as microseconds with up to three decimals (nanoseconds), e.g.
//! `1712195495519689.047`. That is 19 significant digits, while an `f64` holds about 15.9:
//! parsing through `f64` would move such a timestamp by up to 0.125 µs. So the scanner keeps the
//! number's text and this module converts it digit by digit.

/// Converts the text of a JSON number of microseconds into nanoseconds, rounding to the nearest
/// nanosecond (halves away from zero). Also accepts the number wrapped in a JSON string.
///
/// Returns `None` for text that is not a finite number or does not fit in `i64` nanoseconds.
pub fn micros_text_to_ns(text: &str) -> Option<i64> {
    let text = text.trim();
    let text = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')).unwrap_or(text).trim();
    let (negative, unsigned) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if unsigned.bytes().any(|b| matches!(b, b'e' | b'E')) {
        return micros_f64_to_ns(unsigned.parse::<f64>().ok()?).map(|ns| if negative { -ns } else { ns });
    }
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    if !whole.bytes().all(|b| b.is_ascii_digit()) || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut ns: i64 = 0;
    for digit in whole.bytes() {
        ns = ns.checked_mul(10)?.checked_add(i64::from(digit - b'0'))?;
    }
    ns = ns.checked_mul(1000)?;
    // The first three decimals are whole nanoseconds; the fourth decides the rounding.
    let decimals = fraction.as_bytes();
    let mut sub_us: i64 = 0;
    for position in 0..3 {
        sub_us = sub_us * 10 + decimals.get(position).map_or(0, |d| i64::from(d - b'0'));
    }
    if decimals.get(3).is_some_and(|&d| d >= b'5') {
        sub_us += 1;
    }
    ns = ns.checked_add(sub_us)?;
    Some(if negative { -ns } else { ns })
}

/// Converts a microsecond value already held as `f64` (exponent notation, which Kineto does not
/// write for timestamps) into nanoseconds.
fn micros_f64_to_ns(micros: f64) -> Option<i64> {
    let ns = (micros * 1000.0).round();
    if ns.is_finite() && ns.abs() < i64::MAX as f64 { Some(ns as i64) } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_every_nanosecond_of_epoch_microseconds() {
        // 19 significant digits: an f64 would give ...689047 ± 125.
        assert_eq!(micros_text_to_ns("1712195495519689.047"), Some(1_712_195_495_519_689_047));
        assert_eq!(micros_text_to_ns("1694128201429795"), Some(1_694_128_201_429_795_000));
        assert_eq!(micros_text_to_ns("4203669604595.407"), Some(4_203_669_604_595_407));
    }

    #[test]
    fn rounds_sub_nanosecond_digits_to_nearest() {
        assert_eq!(micros_text_to_ns("1.2345"), Some(1235));
        assert_eq!(micros_text_to_ns("1.2344999"), Some(1234));
        assert_eq!(micros_text_to_ns("0.0005"), Some(1));
        assert_eq!(micros_text_to_ns("0.9996"), Some(1000));
        assert_eq!(micros_text_to_ns("36.526"), Some(36526));
        assert_eq!(micros_text_to_ns("30669.0"), Some(30_669_000));
        assert_eq!(micros_text_to_ns(".5"), Some(500));
        assert_eq!(micros_text_to_ns("7."), Some(7000));
    }

    #[test]
    fn accepts_signs_exponents_and_quoted_numbers() {
        assert_eq!(micros_text_to_ns("-2.5"), Some(-2500));
        assert_eq!(micros_text_to_ns("1.5e3"), Some(1_500_000));
        assert_eq!(micros_text_to_ns("\"12.000\""), Some(12_000));
    }

    #[test]
    fn rejects_what_is_not_a_number() {
        assert_eq!(micros_text_to_ns(""), None);
        assert_eq!(micros_text_to_ns("null"), None);
        assert_eq!(micros_text_to_ns("\"abc\""), None);
        assert_eq!(micros_text_to_ns("."), None);
        assert_eq!(micros_text_to_ns("1.2.3"), None);
        assert_eq!(micros_text_to_ns("99999999999999999999"), None);
        assert_eq!(micros_text_to_ns("1e400"), None);
    }
}
