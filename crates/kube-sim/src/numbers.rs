//! JSON numbers as the API server keeps them. Go decodes a request body's numbers into `int64`
//! when they are whole and `float64` otherwise, and writes a whole `float64` without a fraction:
//! `2.0` and `0.0` come back as `2` and `0`, in custom resources and in typed fields (a CRD's
//! `minimum`) alike. Normalising at decode time makes a whole number an integer to the schema
//! checks, and makes `0` and `0.0` one value to server-side apply (helm's apply of a CRD that was
//! created with `minimum: 0.0` is no conflict).

use serde_json::{Number, Value};

/// The largest magnitude a float keeps integer precision at (2^53).
const EXACT: f64 = 9_007_199_254_740_992.0;

/// Rewrites every whole-valued float within `±2^53` below `v` as an integer.
pub(crate) fn normalize(v: &mut Value) {
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() <= EXACT
            {
                // In range by the check above.
                #[allow(clippy::cast_possible_truncation)]
                let whole = f as i64;
                *n = Number::from(whole);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        Value::Object(map) => map.values_mut().for_each(normalize),
        _ => {}
    }
}

/// `f` as Go's `%v` prints a `float64` in the API server's messages: `1`, `0.5`, `1e+21`.
pub(crate) fn go_float(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e21 {
        format!("{f:.0}")
    } else if f.abs() >= 1e21 || (f != 0.0 && f.abs() < 1e-4) {
        let text = format!("{f:e}");
        match text.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp:0>2}"),
            Some((mantissa, exp)) => format!("{mantissa}e-{:0>2}", &exp[1..]),
            None => text,
        }
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_floats_become_integers_and_fractions_stay() {
        let mut v = json!({"a": 0.0, "b": [2.0, 1.5, -3.0], "c": "1.0", "d": 7, "e": 1e300});
        normalize(&mut v);
        assert_eq!(
            v,
            json!({"a": 0, "b": [2, 1.5, -3], "c": "1.0", "d": 7, "e": 1e300})
        );
        assert!(v["a"].is_i64());
    }

    #[test]
    fn floats_print_like_go() {
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(0.0), "0");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(-2.25), "-2.25");
        assert_eq!(go_float(1e21), "1e+21");
    }
}
