//! The subset of CEL that CRD validation rules (`x-kubernetes-validations`)
//! use here, evaluated over JSON values: literals (int, string, bool, null,
//! lists), `self` and `oldSelf`, field selection, indexing, `has()`,
//! `size()`, `string()`, the macros `all`, `exists`, `exists_one`,
//! `filter` and `map`, `!`, `&&`, `||`, `? :`, comparisons, `in` and
//! integer `+`/`-`. A rule outside the subset fails to parse, and the
//! simulated API server refuses the CRD that carries it, so a rule is never
//! silently skipped.

use std::fmt;

use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CelError {
    #[error("syntax error: {0}")]
    Syntax(String),
    #[error("{0}")]
    Eval(String),
}

type Result<T> = std::result::Result<T, CelError>;

/// A parsed rule.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Literal(Value),
    Ident(String),
    List(Vec<Expr>),
    Select(Box<Expr>, String),
    Has(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    /// A function or method call, or a macro when the name is one.
    Call {
        target: Option<Box<Expr>>,
        name: String,
        args: Vec<Expr>,
    },
    Not(Box<Expr>),
    Negate(Box<Expr>),
    Binary(Op, Box<Expr>, Box<Expr>),
    Conditional(Box<Expr>, Box<Expr>, Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    Add,
    Sub,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Or => "||",
            Op::And => "&&",
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::In => "in",
            Op::Add => "+",
            Op::Sub => "-",
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Int(i64),
    Str(String),
    Punct(&'static str),
}

/// Deepest nesting a rule may have: rules are written by CRD authors, but a
/// bound keeps a hostile CRD from exhausting the stack.
const MAX_DEPTH: usize = 64;

const PUNCTUATION: [&str; 19] = [
    "&&", "||", "==", "!=", "<=", ">=", "<", ">", "!", "+", "-", "(", ")", "[", "]", ",", ".", "?",
    ":",
];

fn tokenize(source: &str) -> Result<Vec<Token>> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = source.chars().collect();
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
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            let digits: String = chars[start..i].iter().collect();
            let n = digits
                .parse()
                .map_err(|_| CelError::Syntax(format!("integer {digits} out of range")))?;
            tokens.push(Token::Int(n));
        } else if c == '\'' || c == '"' {
            i += 1;
            let mut text = String::new();
            loop {
                match chars.get(i) {
                    None => return Err(CelError::Syntax("unterminated string".into())),
                    Some(&q) if q == c => break,
                    Some('\\') => {
                        let escaped = chars
                            .get(i + 1)
                            .ok_or_else(|| CelError::Syntax("unterminated string".into()))?;
                        text.push(match escaped {
                            'n' => '\n',
                            't' => '\t',
                            other => *other,
                        });
                        i += 2;
                        continue;
                    }
                    Some(other) => text.push(*other),
                }
                i += 1;
            }
            i += 1;
            tokens.push(Token::Str(text));
        } else {
            let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
            let punct = PUNCTUATION
                .iter()
                .find(|p| rest.starts_with(**p))
                .ok_or_else(|| CelError::Syntax(format!("unexpected character {c:?}")))?;
            tokens.push(Token::Punct(punct));
            i += punct.len();
        }
    }
    Ok(tokens)
}

/// Most tokens a rule may have; with `MAX_DEPTH` it bounds how deep
/// evaluation recurses.
const MAX_TOKENS: usize = 1000;

/// Parses a rule.
pub fn parse(source: &str) -> Result<Expr> {
    let tokens = tokenize(source)?;
    if tokens.len() > MAX_TOKENS {
        return Err(CelError::Syntax(format!(
            "the rule has more than {MAX_TOKENS} tokens"
        )));
    }
    let mut parser = Parser {
        tokens,
        at: 0,
        depth: 0,
    };
    let expr = parser.conditional()?;
    match parser.tokens.get(parser.at) {
        None => Ok(expr),
        Some(token) => Err(CelError::Syntax(format!("unexpected {token:?}"))),
    }
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn peek_punct(&self, punct: &str) -> bool {
        matches!(self.tokens.get(self.at), Some(Token::Punct(p)) if *p == punct)
    }

    fn eat(&mut self, punct: &str) -> bool {
        let found = self.peek_punct(punct);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, punct: &str) -> Result<()> {
        if self.eat(punct) {
            Ok(())
        } else {
            Err(CelError::Syntax(format!(
                "expected {punct:?}, found {:?}",
                self.tokens.get(self.at)
            )))
        }
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(CelError::Syntax("the rule nests too deeply".into()));
        }
        Ok(())
    }

    fn conditional(&mut self) -> Result<Expr> {
        self.enter()?;
        let condition = self.binary(0)?;
        let expr = if self.eat("?") {
            let then = self.conditional()?;
            self.expect(":")?;
            let otherwise = self.conditional()?;
            Expr::Conditional(Box::new(condition), Box::new(then), Box::new(otherwise))
        } else {
            condition
        };
        self.depth -= 1;
        Ok(expr)
    }

    /// Binary operators by precedence level: `||`, `&&`, relations, `+ -`.
    fn binary(&mut self, level: usize) -> Result<Expr> {
        const LEVELS: [&[(&str, Op)]; 4] = [
            &[("||", Op::Or)],
            &[("&&", Op::And)],
            &[
                ("==", Op::Eq),
                ("!=", Op::Ne),
                ("<=", Op::Le),
                (">=", Op::Ge),
                ("<", Op::Lt),
                (">", Op::Gt),
            ],
            &[("+", Op::Add), ("-", Op::Sub)],
        ];
        let Some(ops) = LEVELS.get(level) else {
            return self.unary();
        };
        let mut left = self.binary(level + 1)?;
        loop {
            let op = ops
                .iter()
                .find(|(p, _)| self.peek_punct(p))
                .map(|(_, op)| *op)
                .or_else(|| {
                    (level == 2
                        && matches!(self.tokens.get(self.at), Some(Token::Ident(w)) if w == "in"))
                    .then_some(Op::In)
                });
            let Some(op) = op else {
                return Ok(left);
            };
            self.at += 1;
            let right = self.binary(level + 1)?;
            left = Expr::Binary(op, Box::new(left), Box::new(right));
        }
    }

    fn unary(&mut self) -> Result<Expr> {
        let expr = if self.eat("!") {
            self.enter()?;
            Expr::Not(Box::new(self.unary()?))
        } else if self.eat("-") {
            self.enter()?;
            Expr::Negate(Box::new(self.unary()?))
        } else {
            return self.member();
        };
        self.depth -= 1;
        Ok(expr)
    }

    fn member(&mut self) -> Result<Expr> {
        let mut expr = self.primary()?;
        loop {
            if self.eat(".") {
                let name = self.ident()?;
                expr = if self.eat("(") {
                    Expr::Call {
                        target: Some(Box::new(expr)),
                        name,
                        args: self.arguments(")")?,
                    }
                } else {
                    Expr::Select(Box::new(expr), name)
                };
            } else if self.eat("[") {
                let index = self.conditional()?;
                self.expect("]")?;
                expr = Expr::Index(Box::new(expr), Box::new(index));
            } else {
                return Ok(expr);
            }
        }
    }

    fn ident(&mut self) -> Result<String> {
        match self.tokens.get(self.at) {
            Some(Token::Ident(name)) => {
                self.at += 1;
                Ok(name.clone())
            }
            other => Err(CelError::Syntax(format!(
                "expected a name, found {other:?}"
            ))),
        }
    }

    /// Comma-separated expressions up to `close` (already past the opener).
    fn arguments(&mut self, close: &str) -> Result<Vec<Expr>> {
        let mut args = Vec::new();
        if self.eat(close) {
            return Ok(args);
        }
        loop {
            args.push(self.conditional()?);
            if self.eat(close) {
                return Ok(args);
            }
            self.expect(",")?;
        }
    }

    fn primary(&mut self) -> Result<Expr> {
        let token = self
            .tokens
            .get(self.at)
            .cloned()
            .ok_or_else(|| CelError::Syntax("unexpected end of rule".into()))?;
        self.at += 1;
        match token {
            Token::Int(n) => Ok(Expr::Literal(Value::from(n))),
            Token::Str(s) => Ok(Expr::Literal(Value::String(s))),
            Token::Punct("(") => {
                let expr = self.conditional()?;
                self.expect(")")?;
                Ok(expr)
            }
            Token::Punct("[") => Ok(Expr::List(self.arguments("]")?)),
            Token::Ident(word) => match word.as_str() {
                "true" => Ok(Expr::Literal(Value::Bool(true))),
                "false" => Ok(Expr::Literal(Value::Bool(false))),
                "null" => Ok(Expr::Literal(Value::Null)),
                _ if self.eat("(") => {
                    let mut args = self.arguments(")")?;
                    if word == "has" {
                        return match (args.pop(), args.is_empty()) {
                            (Some(Expr::Select(target, field)), true) => {
                                Ok(Expr::Has(target, field))
                            }
                            _ => Err(CelError::Syntax(
                                "has() takes one field selection, e.g. has(self.spec)".into(),
                            )),
                        };
                    }
                    Ok(Expr::Call {
                        target: None,
                        name: word,
                        args,
                    })
                }
                _ => Ok(Expr::Ident(word)),
            },
            Token::Punct(p) => Err(CelError::Syntax(format!("unexpected {p:?}"))),
        }
    }
}

/// Names bound while evaluating: `self`, `oldSelf`, macro variables.
pub struct Bindings<'a> {
    names: Vec<(String, Value)>,
    parent: Option<&'a Bindings<'a>>,
}

impl<'a> Bindings<'a> {
    pub fn new(names: Vec<(String, Value)>) -> Self {
        Bindings {
            names,
            parent: None,
        }
    }

    fn with(&'a self, name: &str, value: Value) -> Bindings<'a> {
        Bindings {
            names: vec![(name.to_string(), value)],
            parent: Some(self),
        }
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.names
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .or_else(|| self.parent.and_then(|p| p.get(name)))
    }
}

fn eval_error(message: impl Into<String>) -> CelError {
    CelError::Eval(message.into())
}

fn as_bool(value: &Value) -> Result<bool> {
    value
        .as_bool()
        .ok_or_else(|| eval_error(format!("no such overload: expected a bool, got {value}")))
}

fn as_int(value: &Value) -> Result<i64> {
    value
        .as_i64()
        .ok_or_else(|| eval_error(format!("no such overload: expected an int, got {value}")))
}

fn as_list(value: &Value) -> Result<&Vec<Value>> {
    value
        .as_array()
        .ok_or_else(|| eval_error(format!("no such overload: expected a list, got {value}")))
}

fn as_map(value: &Value) -> Result<&Map<String, Value>> {
    value
        .as_object()
        .ok_or_else(|| eval_error(format!("no such overload: expected a map, got {value}")))
}

/// Evaluates a parsed rule.
pub fn eval(expr: &Expr, bindings: &Bindings) -> Result<Value> {
    match expr {
        Expr::Literal(value) => Ok(value.clone()),
        Expr::Ident(name) => bindings
            .get(name)
            .cloned()
            .ok_or_else(|| eval_error(format!("undeclared reference to '{name}'"))),
        Expr::List(items) => items
            .iter()
            .map(|item| eval(item, bindings))
            .collect::<Result<Vec<_>>>()
            .map(Value::Array),
        Expr::Select(target, field) => as_map(&eval(target, bindings)?)?
            .get(field)
            .cloned()
            .ok_or_else(|| eval_error(format!("no such key: {field}"))),
        Expr::Has(target, field) => Ok(Value::Bool(
            as_map(&eval(target, bindings)?)?.contains_key(field),
        )),
        Expr::Index(target, index) => {
            let target = eval(target, bindings)?;
            let index = eval(index, bindings)?;
            match (&target, &index) {
                (Value::Array(items), Value::Number(_)) => usize::try_from(as_int(&index)?)
                    .ok()
                    .and_then(|i| items.get(i))
                    .cloned()
                    .ok_or_else(|| eval_error(format!("index out of range: {index}"))),
                (Value::Object(map), Value::String(key)) => map
                    .get(key)
                    .cloned()
                    .ok_or_else(|| eval_error(format!("no such key: {key}"))),
                _ => Err(eval_error(format!("no such overload: {target}[{index}]"))),
            }
        }
        Expr::Not(inner) => Ok(Value::Bool(!as_bool(&eval(inner, bindings)?)?)),
        Expr::Negate(inner) => as_int(&eval(inner, bindings)?)?
            .checked_neg()
            .map(Value::from)
            .ok_or_else(|| eval_error("integer overflow")),
        Expr::Conditional(condition, then, otherwise) => {
            if as_bool(&eval(condition, bindings)?)? {
                eval(then, bindings)
            } else {
                eval(otherwise, bindings)
            }
        }
        Expr::Binary(op, left, right) => binary(*op, left, right, bindings),
        Expr::Call { target, name, args } => call(target.as_deref(), name, args, bindings),
    }
}

fn binary(op: Op, left: &Expr, right: &Expr, bindings: &Bindings) -> Result<Value> {
    let left = eval(left, bindings)?;
    match op {
        Op::Or if left == Value::Bool(true) => return Ok(left),
        Op::And if left == Value::Bool(false) => return Ok(left),
        _ => {}
    }
    let right = eval(right, bindings)?;
    let value = match op {
        Op::Or | Op::And => {
            as_bool(&left)?;
            Value::Bool(as_bool(&right)?)
        }
        Op::Eq => Value::Bool(left == right),
        Op::Ne => Value::Bool(left != right),
        Op::Lt | Op::Le | Op::Gt | Op::Ge => {
            let ordering = match (&left, &right) {
                (Value::String(a), Value::String(b)) => a.cmp(b),
                _ => as_int(&left)?.cmp(&as_int(&right)?),
            };
            Value::Bool(match op {
                Op::Lt => ordering.is_lt(),
                Op::Le => ordering.is_le(),
                Op::Gt => ordering.is_gt(),
                _ => ordering.is_ge(),
            })
        }
        Op::In => Value::Bool(match &right {
            Value::Array(items) => items.contains(&left),
            Value::Object(map) => left.as_str().is_some_and(|k| map.contains_key(k)),
            _ => return Err(eval_error(format!("no such overload: {left} in {right}"))),
        }),
        Op::Add | Op::Sub => {
            let (a, b) = (as_int(&left)?, as_int(&right)?);
            let sum = if op == Op::Add {
                a.checked_add(b)
            } else {
                a.checked_sub(b)
            };
            Value::from(sum.ok_or_else(|| eval_error("integer overflow"))?)
        }
    };
    Ok(value)
}

fn size(value: &Value) -> Result<Value> {
    let n = match value {
        Value::String(s) => s.chars().count(),
        Value::Array(items) => items.len(),
        Value::Object(map) => map.len(),
        other => return Err(eval_error(format!("no such overload: size({other})"))),
    };
    Ok(Value::from(n))
}

fn call(target: Option<&Expr>, name: &str, args: &[Expr], bindings: &Bindings) -> Result<Value> {
    if let (Some(target), "all" | "exists" | "exists_one" | "filter" | "map") = (target, name) {
        return comprehension(target, name, args, bindings);
    }
    let mut values = Vec::new();
    if let Some(target) = target {
        values.push(eval(target, bindings)?);
    }
    for arg in args {
        values.push(eval(arg, bindings)?);
    }
    match (name, values.as_slice()) {
        ("size", [value]) => size(value),
        ("string", [Value::String(s)]) => Ok(Value::String(s.clone())),
        ("string", [value @ Value::Number(_)]) => Ok(Value::String(as_int(value)?.to_string())),
        _ => Err(eval_error(format!(
            "found no matching overload for '{name}' with {} argument(s)",
            values.len()
        ))),
    }
}

/// The list macros: `list.all(x, predicate)` and friends.
fn comprehension(target: &Expr, name: &str, args: &[Expr], bindings: &Bindings) -> Result<Value> {
    let [Expr::Ident(variable), body] = args else {
        return Err(eval_error(format!(
            "{name}() takes a variable name and an expression"
        )));
    };
    let items = as_list(&eval(target, bindings)?)?.clone();
    let apply = |item: &Value| eval(body, &bindings.with(variable, item.clone()));
    let mut matched = 0usize;
    let mut kept = Vec::new();
    for item in &items {
        let result = apply(item)?;
        if name == "map" {
            kept.push(result);
        } else if as_bool(&result)? {
            matched += 1;
            kept.push(item.clone());
        }
    }
    Ok(match name {
        "all" => Value::Bool(matched == items.len()),
        "exists" => Value::Bool(matched > 0),
        "exists_one" => Value::Bool(matched == 1),
        _ => Value::Array(kept),
    })
}

/// Whether a rule reads `oldSelf` (a transition rule, skipped on create).
pub fn reads_old_self(expr: &Expr) -> bool {
    match expr {
        Expr::Ident(name) => name == "oldSelf",
        Expr::Literal(_) => false,
        Expr::List(items) => items.iter().any(reads_old_self),
        Expr::Select(inner, _) | Expr::Has(inner, _) | Expr::Not(inner) | Expr::Negate(inner) => {
            reads_old_self(inner)
        }
        Expr::Index(a, b) | Expr::Binary(_, a, b) => reads_old_self(a) || reads_old_self(b),
        Expr::Conditional(a, b, c) => reads_old_self(a) || reads_old_self(b) || reads_old_self(c),
        Expr::Call { target, args, .. } => {
            target.as_deref().is_some_and(reads_old_self) || args.iter().any(reads_old_self)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(rule: &str, this: Value) -> Result<Value> {
        let expr = parse(rule)?;
        eval(&expr, &Bindings::new(vec![("self".into(), this)]))
    }

    #[test]
    fn rules_evaluate_as_cel_does() {
        let specs = json!([{"type": "worker", "replicas": 2}, {"type": "chief", "replicas": 1}]);
        let table: &[(&str, Value, Value)] = &[
            (
                "self.all(a, self.exists_one(b, b.type == a.type))",
                specs.clone(),
                json!(true),
            ),
            (
                "self.all(a, self.exists_one(b, b.type == a.type))",
                json!([{"type": "ps"}, {"type": "ps"}]),
                json!(false),
            ),
            (
                "self.exists(r, r.type == 'chief' || r.type == 'worker')",
                json!([{"type": "ps"}]),
                json!(false),
            ),
            (
                "!(self.type in ['chief', 'evaluator']) || self.replicas <= 1",
                json!({"type": "chief", "replicas": 2}),
                json!(false),
            ),
            (
                "!(self.type in ['chief', 'evaluator']) || self.replicas <= 1",
                json!({"type": "worker", "replicas": 2}),
                json!(true),
            ),
            (
                "size(self.name) + size(string(self.n - 1)) + 2 <= 8",
                json!({"name": "abcde", "n": 11}),
                json!(false),
            ),
            ("size(self.filter(x, x > 1))", json!([1, 2, 3]), json!(2)),
            ("self.map(x, x + 1)", json!([1, 2]), json!([2, 3])),
            ("has(self.a) ? self.a : 'none'", json!({}), json!("none")),
            (
                "self.size() == 2 && self[1] == 'b'",
                json!(["a", "b"]),
                json!(true),
            ),
            (
                "'k' in self && !('x' in self)",
                json!({"k": 1}),
                json!(true),
            ),
            ("-self.n < 0", json!({"n": 3}), json!(true)),
            ("\"a\" < 'b'", json!(null), json!(true)),
        ];
        for (rule, this, expected) in table {
            assert_eq!(run(rule, this.clone()).as_ref(), Ok(expected), "{rule}");
        }
    }

    #[test]
    fn short_circuits_skip_errors_like_cel() {
        assert_eq!(
            run("!has(self.a) || self.a.b == 1", json!({})),
            Ok(json!(true))
        );
        assert_eq!(
            run("self.a.b == 1", json!({})),
            Err(CelError::Eval("no such key: a".into()))
        );
    }

    #[test]
    fn transition_rules_are_recognised() {
        let rule = parse("self.spec == oldSelf.spec").expect("parses");
        assert!(reads_old_self(&rule));
        assert!(!reads_old_self(&parse("self.spec == 1").expect("parses")));
    }

    #[test]
    fn what_is_outside_the_subset_fails_to_parse() {
        for rule in [
            "self.x =~ 'a'",
            "self.",
            "has(self)",
            "'open",
            "self.a ? 1",
            "{'a': 1}",
        ] {
            assert!(
                matches!(parse(rule), Err(CelError::Syntax(_))),
                "{rule} is refused"
            );
        }
        let deep = format!("{}1{}", "(".repeat(100), ")".repeat(100));
        assert!(parse(&deep).is_err(), "deep nesting is refused");
        assert!(
            parse(&"!".repeat(100_000)).is_err(),
            "so is a long run of negations"
        );
    }

    #[test]
    fn unknown_functions_and_type_mismatches_are_errors() {
        assert!(run("self.matches('a')", json!("a")).is_err());
        assert!(run("self + 1", json!("a")).is_err());
        assert!(run("9223372036854775807 + self", json!(1)).is_err());
    }
}
