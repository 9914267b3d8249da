//! A small subset of CEL for CRD `x-kubernetes-validations` rules (variable `self`) and webhook
//! `matchConditions` (variables `object`, `oldObject`, `request`): variables and field
//! selection, `has(...)`, `size(...)`, `!`, `&&`, `||`, `==`, `!=` (deep equality, also of maps
//! and lists), `<`, `<=`, `>`, `>=`, parentheses and literals (booleans, integers, strings,
//! `null`). That covers the rules CRDs commonly use for mutual exclusion and presence and the
//! usual "did this part change" match conditions; an expression outside the subset is not
//! evaluated (the README says so) rather than guessed at.

use serde_json::Value;

/// Why a rule could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CelError {
    /// The expression uses CEL beyond this subset.
    Unsupported(String),
    /// Evaluation failed as it would in CEL (e.g. selecting a field that is not set).
    Runtime(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Int(i64),
    Str(String),
    Op(&'static str),
}

fn tokenize(src: &str) -> Result<Vec<Token>, CelError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            let n = text
                .parse()
                .map_err(|_| CelError::Unsupported(format!("integer {text}")))?;
            out.push(Token::Int(n));
        } else if c == '"' || c == '\'' {
            let start = i + 1;
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' {
                    return Err(CelError::Unsupported("escape sequences".into()));
                }
                i += 1;
            }
            if i >= chars.len() {
                return Err(CelError::Unsupported("unterminated string".into()));
            }
            out.push(Token::Str(chars[start..i].iter().collect()));
            i += 1;
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let op = match two.as_str() {
                "&&" => Some("&&"),
                "||" => Some("||"),
                "==" => Some("=="),
                "!=" => Some("!="),
                "<=" => Some("<="),
                ">=" => Some(">="),
                _ => None,
            };
            if let Some(op) = op {
                out.push(Token::Op(op));
                i += 2;
                continue;
            }
            let op = match c {
                '!' => "!",
                '(' => "(",
                ')' => ")",
                '.' => ".",
                '<' => "<",
                '>' => ">",
                other => return Err(CelError::Unsupported(format!("operator {other:?}"))),
            };
            out.push(Token::Op(op));
            i += 1;
        }
    }
    Ok(out)
}

#[derive(Debug, Clone)]
enum Expr {
    Lit(Value),
    /// A variable followed by field selections (the variable name first).
    Path(Vec<String>),
    Has(Vec<String>),
    Size(Box<Expr>),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Cmp(&'static str, Box<Expr>, Box<Expr>),
}

struct Parser<'v> {
    tokens: Vec<Token>,
    pos: usize,
    /// The variables an expression may name.
    variables: &'v [&'v str],
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn eat(&mut self, op: &str) -> bool {
        if matches!(self.peek(), Some(Token::Op(o)) if *o == op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, op: &str) -> Result<(), CelError> {
        if self.eat(op) {
            Ok(())
        } else {
            Err(CelError::Unsupported(format!("expected {op:?}")))
        }
    }

    fn or(&mut self) -> Result<Expr, CelError> {
        let mut left = self.and()?;
        while self.eat("||") {
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, CelError> {
        let mut left = self.unary()?;
        while self.eat("&&") {
            left = Expr::And(Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, CelError> {
        if self.eat("!") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, CelError> {
        let left = self.primary()?;
        for op in ["==", "!=", "<=", ">=", "<", ">"] {
            if self.eat(op) {
                return Ok(Expr::Cmp(op, Box::new(left), Box::new(self.primary()?)));
            }
        }
        Ok(left)
    }

    fn path(&mut self) -> Result<Vec<String>, CelError> {
        let mut fields = match self.peek() {
            Some(Token::Ident(s)) if self.variables.contains(&s.as_str()) => vec![s.clone()],
            _ => return Err(CelError::Unsupported("only paths from variables".into())),
        };
        self.pos += 1;
        while self.eat(".") {
            match self.peek().cloned() {
                Some(Token::Ident(name)) => {
                    self.pos += 1;
                    fields.push(name);
                }
                _ => return Err(CelError::Unsupported("field name expected".into())),
            }
        }
        if matches!(self.peek(), Some(Token::Op("("))) {
            return Err(CelError::Unsupported("method calls".into()));
        }
        Ok(fields)
    }

    fn primary(&mut self) -> Result<Expr, CelError> {
        match self.peek().cloned() {
            Some(Token::Op("(")) => {
                self.pos += 1;
                let e = self.or()?;
                self.expect(")")?;
                Ok(e)
            }
            Some(Token::Int(n)) => {
                self.pos += 1;
                Ok(Expr::Lit(Value::from(n)))
            }
            Some(Token::Str(s)) => {
                self.pos += 1;
                Ok(Expr::Lit(Value::String(s)))
            }
            Some(Token::Ident(name)) => match name.as_str() {
                "true" | "false" => {
                    self.pos += 1;
                    Ok(Expr::Lit(Value::Bool(name == "true")))
                }
                "null" => {
                    self.pos += 1;
                    Ok(Expr::Lit(Value::Null))
                }
                "has" => {
                    self.pos += 1;
                    self.expect("(")?;
                    let path = self.path()?;
                    if path.len() < 2 {
                        return Err(CelError::Unsupported("has() needs a field".into()));
                    }
                    self.expect(")")?;
                    Ok(Expr::Has(path))
                }
                "size" => {
                    self.pos += 1;
                    self.expect("(")?;
                    let inner = self.or()?;
                    self.expect(")")?;
                    Ok(Expr::Size(Box::new(inner)))
                }
                v if self.variables.contains(&v) => Ok(Expr::Path(self.path()?)),
                other => Err(CelError::Unsupported(format!("identifier {other}"))),
            },
            other => Err(CelError::Unsupported(format!("token {other:?}"))),
        }
    }
}

/// Bound variables: name → value.
type Vars<'a> = [(&'a str, &'a Value)];

fn select<'a>(vars: &'a Vars<'a>, path: &[String]) -> Result<&'a Value, CelError> {
    let (variable, fields) = path
        .split_first()
        .ok_or_else(|| CelError::Unsupported("empty path".into()))?;
    let root = vars
        .iter()
        .find(|(name, _)| name == variable)
        .map(|(_, v)| *v)
        .ok_or_else(|| CelError::Runtime(format!("undeclared reference to {variable}")))?;
    fields.iter().try_fold(root, |v, k| {
        v.get(k)
            .ok_or_else(|| CelError::Runtime(format!("no such key: {k}")))
    })
}

fn truth(v: &Value) -> Result<bool, CelError> {
    v.as_bool()
        .ok_or_else(|| CelError::Runtime("no matching overload: expected a bool".into()))
}

fn eval(e: &Expr, root: &Vars<'_>) -> Result<Value, CelError> {
    Ok(match e {
        Expr::Lit(v) => v.clone(),
        Expr::Path(p) => select(root, p)?.clone(),
        Expr::Has(p) => {
            let (last, parents) = p.split_last().unwrap_or((&p[0], &[]));
            let parent = select(root, parents)?;
            Value::Bool(parent.get(last).is_some_and(|v| !v.is_null()))
        }
        Expr::Size(inner) => {
            let n = match eval(inner, root)? {
                Value::Array(a) => a.len(),
                Value::Object(m) => m.len(),
                Value::String(s) => s.chars().count(),
                _ => return Err(CelError::Runtime("no matching overload for size".into())),
            };
            Value::from(n)
        }
        Expr::Not(inner) => Value::Bool(!truth(&eval(inner, root)?)?),
        // CEL's logical operators are commutative over errors; evaluating left to right and
        // short-circuiting matches it for every rule whose guard comes first (the usual style).
        Expr::And(a, b) => Value::Bool(truth(&eval(a, root)?)? && truth(&eval(b, root)?)?),
        Expr::Or(a, b) => Value::Bool(truth(&eval(a, root)?)? || truth(&eval(b, root)?)?),
        Expr::Cmp(op, a, b) => {
            let (a, b) = (eval(a, root)?, eval(b, root)?);
            let ordered = |f: fn(std::cmp::Ordering) -> bool| -> Result<Value, CelError> {
                let ord = match (&a, &b) {
                    (Value::Number(x), Value::Number(y)) => x
                        .as_f64()
                        .zip(y.as_f64())
                        .and_then(|(x, y)| x.partial_cmp(&y)),
                    (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
                    _ => None,
                };
                ord.map(|o| Value::Bool(f(o)))
                    .ok_or_else(|| CelError::Runtime("no matching overload for comparison".into()))
            };
            match *op {
                "==" => Value::Bool(a == b),
                "!=" => Value::Bool(a != b),
                "<" => ordered(std::cmp::Ordering::is_lt)?,
                "<=" => ordered(std::cmp::Ordering::is_le)?,
                ">" => ordered(std::cmp::Ordering::is_gt)?,
                _ => ordered(std::cmp::Ordering::is_ge)?,
            }
        }
    })
}

/// Evaluates `rule` with `self` bound to `value`: `Ok(true)` when the rule holds.
pub(crate) fn holds(rule: &str, value: &Value) -> Result<bool, CelError> {
    holds_with(rule, &[("self", value)])
}

/// Whether `rule` is within the subset this module evaluates (it parses, with `self` as its
/// only variable).
pub(crate) fn supported(rule: &str) -> bool {
    let Ok(tokens) = tokenize(rule) else {
        return false;
    };
    let mut parser = Parser {
        tokens,
        pos: 0,
        variables: &["self"],
    };
    parser.or().is_ok() && parser.pos == parser.tokens.len()
}

/// Evaluates the boolean expression `rule` over the variables `vars`.
pub(crate) fn holds_with(rule: &str, vars: &Vars<'_>) -> Result<bool, CelError> {
    let names: Vec<&str> = vars.iter().map(|(name, _)| *name).collect();
    let mut parser = Parser {
        tokens: tokenize(rule)?,
        pos: 0,
        variables: &names,
    };
    let expr = parser.or()?;
    if parser.pos != parser.tokens.len() {
        return Err(CelError::Unsupported("trailing input".into()));
    }
    truth(&eval(&expr, vars)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn our_rules_are_in_the_subset_and_others_are_recognised_as_outside() {
        for rule in [
            "has(self.machines) != has(self.machineClass)",
            "!(has(self.orphan) && self.orphan && has(self.destroyMachines) && self.destroyMachines)",
        ] {
            assert!(supported(rule), "{rule}");
        }
        for rule in ["self.all(x, x > 0)", "self == oldSelf", "self.size + 1 > 2"] {
            assert!(!supported(rule), "{rule}");
        }
    }

    #[test]
    fn the_rules_of_our_crds() {
        let exclusive = "!(has(self.orphan) && self.orphan && has(self.destroyMachines) && self.destroyMachines)";
        assert_eq!(holds(exclusive, &json!({})), Ok(true));
        assert_eq!(holds(exclusive, &json!({"orphan": true})), Ok(true));
        assert_eq!(
            holds(
                exclusive,
                &json!({"orphan": true, "destroyMachines": false})
            ),
            Ok(true)
        );
        assert_eq!(
            holds(exclusive, &json!({"orphan": true, "destroyMachines": true})),
            Ok(false)
        );
        let one_of = "has(self.machines) != has(self.machineClass)";
        assert_eq!(holds(one_of, &json!({"machines": ["a"]})), Ok(true));
        assert_eq!(
            holds(one_of, &json!({"machineClass": {"name": "x"}})),
            Ok(true)
        );
        assert_eq!(holds(one_of, &json!({})), Ok(false));
        assert_eq!(
            holds(one_of, &json!({"machines": [], "machineClass": {}})),
            Ok(false)
        );
    }

    #[test]
    fn match_conditions_see_object_old_object_and_request() {
        let changed_spec = "request.operation != 'UPDATE' || (!has(object.metadata.deletionTimestamp) && (!has(object.spec) || !has(oldObject.spec) || object.spec != oldObject.spec))";
        let old = json!({"metadata": {"finalizers": ["f"]}, "spec": {"a": [1, {"b": 2}]}});
        let request = |op: &str| json!({"operation": op});
        let check = |op: &str, object: &Value| {
            let request = request(op);
            holds_with(
                changed_spec,
                &[
                    ("request", &request),
                    ("object", object),
                    ("oldObject", &old),
                ],
            )
        };
        let mut finalizer_removed = old.clone();
        finalizer_removed["metadata"]["finalizers"] = json!([]);
        assert_eq!(check("UPDATE", &finalizer_removed), Ok(false));
        let mut spec_edited = old.clone();
        spec_edited["spec"]["a"][1]["b"] = json!(3);
        assert_eq!(check("UPDATE", &spec_edited), Ok(true));
        let mut deleting = spec_edited.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(check("UPDATE", &deleting), Ok(false));
        // A create has no old object: the guard on the operation comes first.
        let request = request("CREATE");
        assert_eq!(
            holds_with(
                changed_spec,
                &[
                    ("request", &request),
                    ("object", &old),
                    ("oldObject", &Value::Null)
                ],
            ),
            Ok(true)
        );
        // `self` is not a match-condition variable.
        assert!(matches!(
            holds_with("self.x == 1", &[("object", &old)]),
            Err(CelError::Unsupported(_))
        ));
    }

    #[test]
    fn comparisons_sizes_and_errors() {
        let v = json!({"replicas": 3, "name": "web", "items": [1, 2], "nested": {"on": true}});
        assert_eq!(
            holds("self.replicas >= 1 && self.replicas < 5", &v),
            Ok(true)
        );
        assert_eq!(holds("size(self.items) == 2 || false", &v), Ok(true));
        assert_eq!(holds("self.name == 'web' && self.nested.on", &v), Ok(true));
        assert_eq!(holds("self.name != \"web\"", &v), Ok(false));
        assert!(matches!(
            holds("self.missing", &v),
            Err(CelError::Runtime(_))
        ));
        assert!(matches!(
            holds("self.items.all(i, i > 0)", &v),
            Err(CelError::Unsupported(_))
        ));
        assert!(matches!(
            holds("self.name + 'x'", &v),
            Err(CelError::Unsupported(_))
        ));
        assert!(matches!(
            holds("self.replicas", &v),
            Err(CelError::Runtime(_))
        ));
    }
}
