//! Typed condition matchers: `is_false("Synced").because("SyncFailed")` names what a scenario
//! waits for or asserts, and a failed assertion shows the condition the object holds instead.

use std::fmt;

use super::condition;

/// A condition an object's status must carry: its type, status and (optionally) reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cond {
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: Option<&'static str>,
}

/// Condition `type_` with status `True`, any reason.
pub const fn is_true(type_: &'static str) -> Cond {
    Cond {
        type_,
        status: "True",
        reason: None,
    }
}

/// Condition `type_` with status `False`, any reason.
pub const fn is_false(type_: &'static str) -> Cond {
    Cond {
        type_,
        status: "False",
        reason: None,
    }
}

impl Cond {
    /// The same condition, with this reason only.
    pub const fn because(self, reason: &'static str) -> Cond {
        Cond {
            reason: Some(reason),
            ..self
        }
    }

    /// Whether `obj` carries the condition.
    pub fn holds(&self, obj: &impl serde::Serialize) -> bool {
        condition(obj, self.type_).is_some_and(|(status, reason, _)| {
            status == self.status && self.reason.is_none_or(|r| r == reason)
        })
    }

    /// The message of the condition when `obj` carries it; panics naming what it carries instead.
    #[track_caller]
    pub fn message(&self, obj: &impl serde::Serialize) -> String {
        assert_cond(obj, *self);
        condition(obj, self.type_).map(|c| c.2).unwrap_or_default()
    }
}

impl fmt::Display for Cond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.type_, self.status)?;
        if let Some(reason) = self.reason {
            write!(f, " ({reason})")?;
        }
        Ok(())
    }
}

/// Panics unless `obj` carries `cond`, showing the condition of that type it has.
#[track_caller]
pub fn assert_cond(obj: &impl serde::Serialize, cond: Cond) {
    assert!(
        cond.holds(obj),
        "expected {cond}, found {:?}",
        condition(obj, cond.type_)
    );
}

/// Panics if `obj` carries a condition of type `type_` (kstatus's `Reconciling` and `Stalled`
/// are present only while `True`).
#[track_caller]
pub fn assert_absent(obj: &impl serde::Serialize, type_: &str) {
    assert_eq!(condition(obj, type_), None, "no {type_} condition expected");
}
