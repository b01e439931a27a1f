//! The formats Kubernetes requires of names, label keys and values, and
//! port names, each returning kube-apiserver's own messages
//! (`k8s.io/apimachinery/pkg/util/validation` and `…/api/validate/content`,
//! v0.37.2): an empty list when the value is valid, else one message per
//! broken rule, in upstream order. Pure.

/// The longest DNS-1123 label: a container, volume or Service name.
pub const DNS1123_LABEL_MAX: usize = 63;
/// The longest DNS-1123 subdomain (a host name, a label key's prefix).
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// The longest label value and label key name part.
const LABEL_PART_MAX: usize = 63;
/// The longest IANA_SVC_NAME (a port name).
const PORT_NAME_MAX: usize = 15;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case \
     alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
     alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and \
     must start and end with an alphanumeric character";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric \
     characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `must be no more than N characters`.
pub fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// kube's `RegexError`: the message, examples and the regular expression.
fn regex_error(message: &str, format: &str, examples: &[&str]) -> String {
    let examples: String = examples
        .iter()
        .map(|e| format!("'{e}', "))
        .collect::<Vec<_>>()
        .join(" or ");
    if examples.is_empty() {
        format!("{message} (regex used for validation is '{format}')")
    } else {
        format!("{message} (e.g. {examples}regex used for validation is '{format}')")
    }
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, whatever the length.
fn matches_dns1123_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            is_lower_alnum(*first)
                && is_lower_alnum(*last)
                && bytes.iter().all(|b| is_lower_alnum(*b) || *b == b'-')
        }
        _ => false,
    }
}

fn matches_dns1123_subdomain(value: &str) -> bool {
    value.split('.').all(matches_dns1123_label)
}

/// A DNS-1123 label: container, volume and init container names.
pub fn dns1123_label(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errors.push(max_len_error(DNS1123_LABEL_MAX));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            errors.push("must not contain dots".to_string());
        } else {
            errors.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errors
}

/// A DNS-1123 subdomain: a host name, an object name, a label key's prefix.
pub fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errors.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    if !matches_dns1123_subdomain(value) {
        errors.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            &format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*"),
            &["example.com"],
        ));
    }
    errors
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn matches_label_part(value: &str) -> bool {
    let bytes = value.as_bytes();
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

/// A label key (`[prefix/]name`), as kube-apiserver checks labels and
/// label selectors.
pub fn label_key(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_string());
            } else {
                errors.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errors.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. \
                 'example.com/MyName')",
                regex_error(
                    LABEL_KEY_MSG,
                    LABEL_KEY_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errors;
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > LABEL_PART_MAX {
        errors.push(format!("name part {}", max_len_error(LABEL_PART_MAX)));
    }
    if !matches_label_part(name) {
        errors.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_MSG,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errors
}

/// A label value (empty is valid).
pub fn label_value(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > LABEL_PART_MAX {
        errors.push(max_len_error(LABEL_PART_MAX));
    }
    if !value.is_empty() && !matches_label_part(value) {
        errors.push(regex_error(
            LABEL_VALUE_MSG,
            &format!("({LABEL_KEY_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errors
}

/// An IANA_SVC_NAME: a container port's name.
pub fn port_name(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > PORT_NAME_MAX {
        errors.push(max_len_error(PORT_NAME_MAX));
    }
    if value.is_empty() || !value.bytes().all(|b| is_lower_alnum(b) || b == b'-') {
        errors.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string(),
        );
    }
    if !value.bytes().any(|b| b.is_ascii_lowercase()) {
        errors.push("must contain at least one letter (a-z)".to_string());
    }
    if value.contains("--") {
        errors.push("must not contain consecutive hyphens".to_string());
    }
    if value.starts_with('-') || value.ends_with('-') {
        errors.push("must not begin or end with a hyphen".to_string());
    }
    errors
}

/// kube's `InclusiveRangeError`.
pub fn inclusive_range_error(low: i64, high: i64) -> String {
    format!("must be between {low} and {high}, inclusive")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABEL_REGEX: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
        characters or '-', and must start and end with an alphanumeric character (e.g. \
        'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

    #[test]
    fn dns1123_labels_as_kube_apiserver_words_them() {
        for valid in ["tensorflow", "a", "0", "side-car-2", &"a".repeat(63)] {
            assert_eq!(dns1123_label(valid), Vec::<String>::new(), "{valid}");
        }
        // kube's RegexError puts "', " after each example and " or " between
        // them: hence the two spaces before "or".
        assert_eq!(dns1123_label("Main"), [LABEL_REGEX]);
        assert_eq!(dns1123_label("-a"), [LABEL_REGEX]);
        assert_eq!(dns1123_label(""), [LABEL_REGEX]);
        assert_eq!(dns1123_label("a.b"), ["must not contain dots"]);
        assert_eq!(
            dns1123_label(&"a".repeat(64)),
            ["must be no more than 63 characters"]
        );
    }

    #[test]
    fn subdomains_label_keys_and_values() {
        assert!(dns1123_subdomain("svc.ns.svc.clusterset.local").is_empty());
        assert_eq!(dns1123_subdomain("a..b").len(), 1);
        assert_eq!(
            dns1123_subdomain(&"a".repeat(254))[0],
            "must be no more than 253 characters"
        );
        for valid in ["zone", "topology.kubernetes.io/zone", "A_b.c-D"] {
            assert_eq!(label_key(valid), Vec::<String>::new(), "{valid}");
        }
        assert_eq!(
            label_key("zone!"),
            [
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must \
              start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
              '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ]
        );
        assert_eq!(label_key("/zone"), ["prefix part must be non-empty"]);
        assert_eq!(label_key("a/b/c").len(), 1);
        assert_eq!(label_value(""), Vec::<String>::new());
        assert_eq!(label_value("us-east_1.a"), Vec::<String>::new());
        assert_eq!(label_value("a b").len(), 1);
    }

    #[test]
    fn port_names_are_iana_service_names() {
        assert!(port_name("tfjob-port").is_empty());
        assert_eq!(
            port_name("TFJob_Port"),
            ["must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"]
        );
        assert_eq!(
            port_name("a-very-long-port-name"),
            ["must be no more than 15 characters"]
        );
        assert_eq!(
            port_name("2222"),
            ["must contain at least one letter (a-z)"]
        );
        assert_eq!(
            port_name("-a--b"),
            [
                "must not contain consecutive hyphens",
                "must not begin or end with a hyphen"
            ]
        );
    }
}
