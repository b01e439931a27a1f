//! Label and field selectors as accepted by the Kubernetes API server's
//! `labelSelector` and `fieldSelector` query parameters.
//!
//! The grammar, validation and matching rules follow apimachinery's
//! `pkg/labels/selector.go` and `pkg/fields/selector.go`, so that clients
//! written against a real API server see the same results (and similar
//! error messages) from the emulator.

use std::collections::{BTreeMap, BTreeSet};

/// Why a selector string was rejected. The API server answers all of these
/// with 400 Bad Request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The `labelSelector` could not be parsed or failed validation.
    #[error("{0}")]
    InvalidLabelSelector(String),
    /// The `fieldSelector` could not be parsed (bad operator or escape).
    #[error("{0}")]
    InvalidFieldSelector(String),
    /// The field selector names a field this resource does not index.
    #[error("field label not supported: {0}")]
    UnsupportedFieldLabel(String),
}

/// One parsed label requirement. `=`/`==` are stored as a one-element `In`
/// and `!=` as a one-element `NotIn`, since upstream matches them identically.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => labels.get(key).is_none_or(|v| !values.contains(v)),
            Requirement::Exists(key) => labels.contains_key(key),
            Requirement::DoesNotExist(key) => !labels.contains_key(key),
            // A label that is missing or not an integer never satisfies Gt/Lt.
            Requirement::GreaterThan(key, bound) => labels
                .get(key)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *bound),
            Requirement::LessThan(key, bound) => labels
                .get(key)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *bound),
        }
    }
}

/// A parsed `labelSelector`: a conjunction of requirements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax: `a=b`, `a==b`, `a!=b`,
    /// `a in (x,y)`, `a notin (x,y)`, `a` (exists), `!a` (not exists),
    /// `a>1` / `a<1` (integer comparison), comma-joined. Whitespace between
    /// tokens is ignored. The empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        Parser::new(s)
            .parse()
            .map(|requirements| LabelSelector { requirements })
            .map_err(SelectorError::InvalidLabelSelector)
    }

    /// Whether an object carrying `labels` satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Identifier(String),
    /// `!`
    Bang,
    /// `=`
    Equals,
    /// `==`
    DoubleEquals,
    /// `!=`
    NotEquals,
    /// `>`
    GreaterThan,
    /// `<`
    LessThan,
    In,
    NotIn,
    OpenPar,
    ClosedPar,
    Comma,
    End,
}

impl Token {
    /// The source text of the token, used in error messages like upstream.
    fn literal(&self) -> &str {
        match self {
            Token::Identifier(s) => s,
            Token::Bang => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::GreaterThan => ">",
            Token::LessThan => "<",
            Token::In => "in",
            Token::NotIn => "notin",
            Token::OpenPar => "(",
            Token::ClosedPar => ")",
            Token::Comma => ",",
            Token::End => "",
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn is_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Splits the selector into tokens. Every run of non-special, non-blank
/// characters is one identifier, exactly like upstream's lexer, so values
/// such as `a.b/c-d` need no quoting.
fn lex(s: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if is_whitespace(c) {
            continue;
        }
        let token = match c {
            '!' if chars.next_if_eq(&'=').is_some() => Token::NotEquals,
            '!' => Token::Bang,
            '=' if chars.next_if_eq(&'=').is_some() => Token::DoubleEquals,
            '=' => Token::Equals,
            '>' => Token::GreaterThan,
            '<' => Token::LessThan,
            '(' => Token::OpenPar,
            ')' => Token::ClosedPar,
            ',' => Token::Comma,
            _ => {
                let mut ident = String::from(c);
                while let Some(next) = chars.next_if(|n| !is_whitespace(*n) && !is_special(*n)) {
                    ident.push(next);
                }
                match ident.as_str() {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    _ => Token::Identifier(ident),
                }
            }
        };
        tokens.push(token);
    }
    tokens
}

/// Whether `in`/`notin` are keywords (operator position) or plain identifiers
/// (key and value positions), mirroring upstream's parser contexts.
#[derive(Clone, Copy)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    tokens: Vec<Token>,
    position: usize,
}

impl Parser {
    fn new(s: &str) -> Self {
        Parser {
            tokens: lex(s),
            position: 0,
        }
    }

    fn token_at(&self, index: usize, context: Context) -> Token {
        let token = self.tokens.get(index).cloned().unwrap_or(Token::End);
        match (context, token) {
            (Context::Values, Token::In) => Token::Identifier("in".into()),
            (Context::Values, Token::NotIn) => Token::Identifier("notin".into()),
            (_, token) => token,
        }
    }

    fn lookahead(&self, context: Context) -> Token {
        self.token_at(self.position, context)
    }

    fn consume(&mut self, context: Context) -> Token {
        let token = self.token_at(self.position, context);
        self.position += 1;
        token
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            match self.lookahead(Context::Values) {
                Token::Identifier(_) | Token::Bang => {
                    let requirement = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(requirement);
                    match self.consume(Context::Values) {
                        Token::End => return Ok(requirements),
                        Token::Comma => match self.lookahead(Context::Values) {
                            Token::Identifier(_) | Token::Bang => {}
                            other => {
                                return Err(format!(
                                    "found '{}', expected: identifier after ','",
                                    other.literal()
                                ));
                            }
                        },
                        other => {
                            return Err(format!(
                                "found '{}', expected: ',' or 'end of string'",
                                other.literal()
                            ));
                        }
                    }
                }
                Token::End => return Ok(requirements),
                other => {
                    return Err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        other.literal()
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let mut token = self.consume(Context::Values);
        let negated = token == Token::Bang;
        if negated {
            token = self.consume(Context::Values);
        }
        let Token::Identifier(key) = token else {
            return Err(format!("found '{}', expected: identifier", token.literal()));
        };
        validate_label_key(&key)?;
        if negated {
            return Ok(Requirement::DoesNotExist(key));
        }
        if matches!(self.lookahead(Context::Values), Token::End | Token::Comma) {
            return Ok(Requirement::Exists(key));
        }
        match self.consume(Context::KeyAndOperator) {
            Token::In => Ok(Requirement::In(key.clone(), self.parse_values(&key)?)),
            Token::NotIn => Ok(Requirement::NotIn(key.clone(), self.parse_values(&key)?)),
            Token::Equals | Token::DoubleEquals => {
                let value = self.parse_exact_value(&key)?;
                Ok(Requirement::In(key, BTreeSet::from([value])))
            }
            Token::NotEquals => {
                let value = self.parse_exact_value(&key)?;
                Ok(Requirement::NotIn(key, BTreeSet::from([value])))
            }
            Token::GreaterThan => {
                let bound = self.parse_integer(&key)?;
                Ok(Requirement::GreaterThan(key, bound))
            }
            Token::LessThan => {
                let bound = self.parse_integer(&key)?;
                Ok(Requirement::LessThan(key, bound))
            }
            other => Err(format!(
                "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                other.literal()
            )),
        }
    }

    /// Parses `(v1, v2, ...)`. Like upstream, empty members (`(a,)`, `()`)
    /// stand for the empty value.
    fn parse_values(&mut self, key: &str) -> Result<BTreeSet<String>, String> {
        let open = self.consume(Context::Values);
        if open != Token::OpenPar {
            return Err(format!("found '{}' expected: '('", open.literal()));
        }
        let mut values = BTreeSet::new();
        match self.lookahead(Context::Values) {
            Token::ClosedPar => {
                self.consume(Context::Values);
                values.insert(String::new());
            }
            Token::Identifier(_) | Token::Comma => {
                self.parse_identifier_list(&mut values)?;
                let close = self.consume(Context::Values);
                if close != Token::ClosedPar {
                    return Err(format!("found '{}', expected: ')'", close.literal()));
                }
            }
            other => {
                return Err(format!(
                    "found '{}', expected: ',', ')' or identifier",
                    other.literal()
                ));
            }
        }
        for value in &values {
            validate_label_value(key, value)?;
        }
        Ok(values)
    }

    /// Reads set members up to (not including) the closing parenthesis.
    fn parse_identifier_list(&mut self, values: &mut BTreeSet<String>) -> Result<(), String> {
        loop {
            match self.consume(Context::Values) {
                Token::Identifier(value) => {
                    values.insert(value);
                    match self.lookahead(Context::Values) {
                        Token::Comma => {}
                        Token::ClosedPar => return Ok(()),
                        other => {
                            return Err(format!(
                                "found '{}', expected: ',' or ')'",
                                other.literal()
                            ));
                        }
                    }
                }
                Token::Comma => {
                    // A leading, trailing or doubled comma denotes "".
                    if values.is_empty() {
                        values.insert(String::new());
                    }
                    match self.lookahead(Context::Values) {
                        Token::ClosedPar => {
                            values.insert(String::new());
                            return Ok(());
                        }
                        Token::Comma => {
                            self.consume(Context::Values);
                            values.insert(String::new());
                        }
                        _ => {}
                    }
                }
                other => {
                    return Err(format!(
                        "found '{}', expected: ',', or identifier",
                        other.literal()
                    ));
                }
            }
        }
    }

    /// Parses the right-hand side of `=`, `==`, `!=`; nothing means "".
    fn parse_exact_value(&mut self, key: &str) -> Result<String, String> {
        if matches!(self.lookahead(Context::Values), Token::End | Token::Comma) {
            return Ok(String::new());
        }
        match self.consume(Context::Values) {
            Token::Identifier(value) => {
                validate_label_value(key, &value)?;
                Ok(value)
            }
            other => Err(format!("found '{}', expected: identifier", other.literal())),
        }
    }

    fn parse_integer(&mut self, key: &str) -> Result<i64, String> {
        let value = self.parse_exact_value(key)?;
        value.parse::<i64>().map_err(|_| {
            format!("for 'Gt', 'Lt' operators, the value must be an integer, got {value:?}")
        })
    }
}

/// Upstream's `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]` (names and values).
fn is_label_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// RFC 1123 subdomain, used for the optional `prefix/` of a label key.
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            let bytes = part.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(first), Some(last)) => {
                    (first.is_ascii_lowercase() || first.is_ascii_digit())
                        && (last.is_ascii_lowercase() || last.is_ascii_digit())
                        && bytes
                            .iter()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                }
                _ => false,
            }
        })
}

fn validate_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let valid_prefix = prefix.is_none_or(is_dns1123_subdomain);
    if valid_prefix && name.len() <= 63 && is_label_name(name) {
        Ok(())
    } else {
        Err(format!(
            "invalid label key {key:?}: must be a qualified name ([prefix/]name, where name is at \
             most 63 alphanumeric characters, '-', '_' or '.' starting and ending with an \
             alphanumeric character, and prefix is a DNS subdomain)"
        ))
    }
}

fn validate_label_value(key: &str, value: &str) -> Result<(), String> {
    if value.is_empty() || (value.len() <= 63 && is_label_name(value)) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value {value:?} for key {key:?}: must be empty or at most 63 \
             alphanumeric characters, '-', '_' or '.' starting and ending with an alphanumeric \
             character"
        ))
    }
}

/// One `field=value` (`equal`) or `field!=value` term.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    field: String,
    value: String,
    equal: bool,
}

/// A parsed `fieldSelector`: a conjunction of equality/inequality terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses `fieldSelector`: comma-joined `field=value`, `field==value`,
    /// `field!=value`. Values may be empty. `\,`, `\=` and `\\` escape those
    /// characters in values. `allowed` is the set of field labels the
    /// resource supports; the caller must include `metadata.name` and
    /// `metadata.namespace` where upstream supports them (all resources).
    pub fn parse(s: &str, allowed: &[&str]) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for term in split_terms(s) {
            // Upstream skips empty terms, so `a=b,` is valid.
            if term.is_empty() {
                continue;
            }
            let Some((field, operator, raw_value)) = split_term(term) else {
                return Err(SelectorError::InvalidFieldSelector(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                )));
            };
            let value = unescape_value(raw_value)?;
            if !allowed.contains(&field) {
                return Err(SelectorError::UnsupportedFieldLabel(field.to_string()));
            }
            requirements.push(FieldRequirement {
                field: field.to_string(),
                value,
                equal: operator != "!=",
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Whether an object satisfies every term; `field_value` supplies the
    /// object's value for a field label. A missing field counts as "", so
    /// `spec.nodeName=` matches unscheduled pods as it does upstream.
    pub fn matches(&self, field_value: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| {
            let actual = field_value(&r.field).unwrap_or_default();
            (actual == r.value) == r.equal
        })
    }
}

/// Splits on commas that are not backslash-escaped; escapes are kept for
/// `unescape_value` to process.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// Splits a term at the first operator. Field names cannot be escaped, so the
/// first `!=`, `==` or `=` (checked in that order at each position, so `==`
/// does not leave `=` in the value) is the split point.
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    term.char_indices().find_map(|(i, _)| {
        let rest = &term[i..];
        ["!=", "==", "="]
            .into_iter()
            .find(|op| rest.starts_with(op))
            .map(|op| (&term[..i], op, &rest[op.len()..]))
    })
}

fn unescape_value(s: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(s.len());
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(SelectorError::InvalidFieldSelector(format!(
                    "invalid field selector: invalid escape sequence: \\{c}"
                )));
            }
            out.push(c);
            escaped = false;
        } else {
            match c {
                '\\' => escaped = true,
                ',' | '=' => {
                    return Err(SelectorError::InvalidFieldSelector(format!(
                        "invalid field selector: unescaped character in value: {c}"
                    )));
                }
                _ => out.push(c),
            }
        }
    }
    if escaped {
        return Err(SelectorError::InvalidFieldSelector(
            "invalid field selector: invalid escape sequence: \\".to_string(),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
    }

    fn label_err(s: &str) -> String {
        match LabelSelector::parse(s) {
            Ok(parsed) => panic!("{s:?} should be rejected, got {parsed:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(sel("").matches(&labels(&[])));
        assert!(sel("  ").matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn equality_operators() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        assert!(sel("app=web").matches(&l));
        assert!(sel("app==web").matches(&l));
        assert!(!sel("app=db").matches(&l));
        assert!(sel("app!=db").matches(&l));
        assert!(!sel("app!=web").matches(&l));
        // `!=` on a missing label matches, `=` does not.
        assert!(sel("missing!=x").matches(&l));
        assert!(!sel("missing=x").matches(&l));
        // Conjunction.
        assert!(sel("app=web,tier=front").matches(&l));
        assert!(!sel("app=web,tier=back").matches(&l));
    }

    #[test]
    fn empty_value_after_equals() {
        assert!(sel("a=").matches(&labels(&[("a", "")])));
        assert!(!sel("a=").matches(&labels(&[("a", "x")])));
        assert!(!sel("a=,b").matches(&labels(&[("a", "")])));
        assert!(sel("a=,b").matches(&labels(&[("a", ""), ("b", "1")])));
    }

    #[test]
    fn set_based_requirements() {
        let s = sel("env in (prod, staging),tier notin (db,cache)");
        assert!(s.matches(&labels(&[("env", "prod"), ("tier", "web")])));
        assert!(s.matches(&labels(&[("env", "staging")])));
        assert!(!s.matches(&labels(&[("env", "dev")])));
        assert!(!s.matches(&labels(&[("env", "prod"), ("tier", "db")])));
        // `in` requires presence, `notin` does not.
        assert!(!s.matches(&labels(&[("tier", "web")])));
    }

    #[test]
    fn set_with_empty_members() {
        assert!(sel("a in ()").matches(&labels(&[("a", "")])));
        assert!(sel("a in (,x)").matches(&labels(&[("a", "")])));
        let s = sel("a in (x,)");
        assert!(s.matches(&labels(&[("a", "")])));
        assert!(s.matches(&labels(&[("a", "x")])));
        assert!(!s.matches(&labels(&[("a", "y")])));
    }

    #[test]
    fn keywords_are_identifiers_in_value_position() {
        assert!(sel("in=notin").matches(&labels(&[("in", "notin")])));
        assert!(sel("a in (in,notin)").matches(&labels(&[("a", "in")])));
    }

    #[test]
    fn exists_and_not_exists() {
        let l = labels(&[("a", "1")]);
        assert!(sel("a").matches(&l));
        assert!(!sel("b").matches(&l));
        assert!(sel("!b").matches(&l));
        assert!(!sel("!a").matches(&l));
        assert!(sel(" a , ! b ").matches(&l));
        assert!(sel("example.com/role").matches(&labels(&[("example.com/role", "x")])));
    }

    #[test]
    fn greater_and_less_than() {
        let l = labels(&[("n", "5"), ("s", "abc")]);
        assert!(sel("n>4").matches(&l));
        assert!(!sel("n>5").matches(&l));
        assert!(sel("n<6").matches(&l));
        assert!(!sel("n<5").matches(&l));
        // Missing or non-integer labels never match.
        assert!(!sel("m>1").matches(&l));
        assert!(!sel("s>1").matches(&l));
        assert!(label_err("n>abc").contains("must be an integer"));
    }

    #[test]
    fn syntax_errors() {
        assert!(label_err("a in (x,y").starts_with("unable to parse requirement: "));
        assert!(label_err("a in x").contains("expected: '('"));
        assert!(label_err("a=b,").contains("expected: identifier after ','"));
        assert!(label_err(",a").contains("expected: !, identifier"));
        assert!(label_err("=b").contains("found '=', expected: !, identifier"));
        assert!(label_err("a=(b)").contains("expected: identifier"));
        assert!(label_err("a b").contains("expected: in, notin, =, ==, !=, gt, lt"));
        assert!(label_err("a=b c").contains("expected: ',' or 'end of string'"));
        assert!(label_err("!a=b").contains("found '='"));
    }

    #[test]
    fn invalid_keys_and_values() {
        assert!(label_err("-a=b").contains("invalid label key"));
        assert!(label_err("Bad_Prefix/a=b").contains("invalid label key"));
        assert!(label_err("/a").contains("invalid label key"));
        assert!(label_err("a=b.").contains("invalid label value"));
        assert!(label_err(&format!("a={}", "x".repeat(64))).contains("invalid label value"));
        assert!(label_err("a in (x, -y)").contains("invalid label value"));
    }

    const POD_FIELDS: &[&str] = &["metadata.name", "metadata.namespace", "spec.nodeName"];

    fn fields(s: &str) -> FieldSelector {
        FieldSelector::parse(s, POD_FIELDS).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn pod(name: &str, node: Option<&str>) -> impl Fn(&str) -> Option<String> {
        let name = name.to_string();
        let node = node.map(str::to_string);
        move |field| match field {
            "metadata.name" => Some(name.clone()),
            "spec.nodeName" => node.clone(),
            _ => None,
        }
    }

    #[test]
    fn field_equality_and_inequality() {
        assert!(fields("metadata.name=p1").matches(pod("p1", None)));
        assert!(fields("metadata.name==p1").matches(pod("p1", None)));
        assert!(!fields("metadata.name=p2").matches(pod("p1", None)));
        assert!(fields("metadata.name!=p2").matches(pod("p1", None)));
        assert!(!fields("metadata.name!=p1").matches(pod("p1", None)));
        let both = fields("metadata.name=p1,spec.nodeName=n1");
        assert!(both.matches(pod("p1", Some("n1"))));
        assert!(!both.matches(pod("p1", Some("n2"))));
        assert!(fields("").matches(pod("anything", None)));
    }

    #[test]
    fn missing_field_counts_as_empty() {
        let unbound = fields("spec.nodeName=");
        assert!(unbound.matches(pod("p", None)));
        assert!(!unbound.matches(pod("p", Some("n1"))));
        let bound = fields("spec.nodeName!=");
        assert!(bound.matches(pod("p", Some("n1"))));
        assert!(!bound.matches(pod("p", None)));
    }

    #[test]
    fn field_escapes() {
        let s = fields(r"metadata.name=a\,b\=c\\d");
        assert!(s.matches(pod(r"a,b=c\d", None)));
        // The escaped comma does not split the term: one requirement, value "x,y".
        let escaped_comma = fields(r"metadata.name=x\,y");
        assert_eq!(escaped_comma.requirements.len(), 1);
        assert!(escaped_comma.matches(pod("x,y", None)));
    }

    #[test]
    fn field_escape_errors() {
        let err = FieldSelector::parse(r"metadata.name=a\b", POD_FIELDS).unwrap_err();
        assert_eq!(
            err.to_string(),
            r"invalid field selector: invalid escape sequence: \b"
        );
        let err = FieldSelector::parse(r"metadata.name=a\", POD_FIELDS).unwrap_err();
        assert!(matches!(err, SelectorError::InvalidFieldSelector(_)));
        let err = FieldSelector::parse("metadata.name=a=b", POD_FIELDS).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid field selector: unescaped character in value: ="
        );
        let err = FieldSelector::parse("metadata.name", POD_FIELDS).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        );
    }

    #[test]
    fn unsupported_field_label() {
        let err = FieldSelector::parse("status.phase=Running", POD_FIELDS).unwrap_err();
        assert_eq!(
            err,
            SelectorError::UnsupportedFieldLabel("status.phase".into())
        );
        assert_eq!(err.to_string(), "field label not supported: status.phase");
    }

    proptest::proptest! {
        /// Any text as a label selector: parsed or refused, no panic.
        #[test]
        fn any_selector_parses_or_is_refused(text in "[a-z0-9=!,()<> .:/-]{0,40}|.{0,20}") {
            if let Ok(selector) = LabelSelector::parse(&text) {
                let _ = selector.matches(&BTreeMap::from([("a".to_string(), "1".to_string())]));
            }
        }
    }
}
