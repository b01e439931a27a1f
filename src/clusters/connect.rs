//! From a `MemberCluster`'s kubeconfig Secret on home to a client — one
//! function, used by the controller and by `plan`.
//!
//! A member kubeconfig is written by whoever may write Secrets in the
//! controller's namespace, and it runs inside the controller: it may name
//! servers, certificates, tokens and keys inline, and nothing else. A
//! kubeconfig that would run a command (`exec`, `auth-provider`) or read a
//! local file (`tokenFile`, certificate or key paths) is refused with a
//! message saying which entry; the Secret must be in the controller's
//! namespace; and no message repeats the Secret's content.

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::actors::call::{self, Backoff, Kind, Outcome};
use crate::api::{DEFAULT_KUBECONFIG_KEY, MemberCluster, SECRETS_NAMESPACE};

/// Why a member cannot be connected (messages never hold Secret data).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "spec.kubeconfigSecretRef names namespace {0}: member kubeconfig Secrets must be in \
         the controller's namespace {SECRETS_NAMESPACE}"
    )]
    ForeignNamespace(String),
    #[error("reading Secret {secret}: {error}")]
    Read { secret: String, error: String },
    #[error("Secret {secret} does not exist")]
    Missing { secret: String },
    #[error("Secret {secret} has no key {key}")]
    NoKey { secret: String, key: String },
    #[error("key {key} of Secret {secret} is not a valid kubeconfig (UTF-8 YAML)")]
    Unreadable { secret: String, key: String },
    #[error("the kubeconfig in Secret {secret} is refused: {why}")]
    Unsafe { secret: String, why: String },
    #[error("the kubeconfig in Secret {secret} cannot be used: {error}")]
    Config { secret: String, error: String },
}

/// What in a kubeconfig would make the controller run a command or read a
/// local file; empty when nothing. Pure.
pub fn unsafe_entries(kubeconfig: &Kubeconfig) -> Vec<String> {
    let mut found = Vec::new();
    for named in &kubeconfig.auth_infos {
        let Some(user) = &named.auth_info else {
            continue;
        };
        let name = &named.name;
        let checks = [
            (user.exec.is_some(), "exec (runs a command)"),
            (
                user.auth_provider.is_some(),
                "auth-provider (may run a command)",
            ),
            (user.token_file.is_some(), "tokenFile (reads a local file)"),
            (
                user.client_certificate.is_some(),
                "client-certificate (reads a local file)",
            ),
            (user.client_key.is_some(), "client-key (reads a local file)"),
        ];
        for (present, what) in checks {
            if present {
                found.push(format!("user {name}: {what}"));
            }
        }
    }
    for named in &kubeconfig.clusters {
        if named
            .cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            found.push(format!(
                "cluster {}: certificate-authority (reads a local file)",
                named.name
            ));
        }
    }
    found
}

/// The client for `member`, from its kubeconfig Secret on home, and the
/// Secret's resourceVersion. Transient failures to read the Secret are
/// retried with `backoff` before anything is reported.
pub async fn member_client(
    home: &Client,
    member: &MemberCluster,
    backoff: Backoff,
    wrap: impl FnOnce(kube::Config) -> Result<Client, String>,
) -> Result<(Client, Option<String>), ConnectError> {
    let reference = &member.spec.kubeconfig_secret_ref;
    let secret_name = format!("{}/{}", reference.namespace, reference.name);
    if reference.namespace != SECRETS_NAMESPACE {
        return Err(ConnectError::ForeignNamespace(reference.namespace.clone()));
    }
    let secrets: Api<Secret> = Api::namespaced(home.clone(), &reference.namespace);
    let what = format!("reading Secret {secret_name}");
    let secret =
        match call::call(Kind::Write, backoff, &what, || secrets.get(&reference.name)).await {
            Ok(Outcome::Done(secret)) => secret,
            Ok(_) => {
                return Err(ConnectError::Missing {
                    secret: secret_name,
                });
            }
            Err(e) => {
                return Err(ConnectError::Read {
                    secret: secret_name,
                    error: crate::telemetry::shown(&e),
                });
            }
        };
    let key = reference
        .key
        .clone()
        .unwrap_or_else(|| DEFAULT_KUBECONFIG_KEY.to_string());
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&key))
        .map(|b| b.0.clone())
        .ok_or_else(|| ConnectError::NoKey {
            secret: secret_name.clone(),
            key: key.clone(),
        })?;
    let unreadable = || ConnectError::Unreadable {
        secret: secret_name.clone(),
        key: key.clone(),
    };
    let text = String::from_utf8(bytes).map_err(|_| unreadable())?;
    let kubeconfig = Kubeconfig::from_yaml(&text).map_err(|_| unreadable())?;
    let refused = unsafe_entries(&kubeconfig);
    if !refused.is_empty() {
        return Err(ConnectError::Unsafe {
            secret: secret_name,
            why: refused.join("; "),
        });
    }
    let config_error = |error: String| ConnectError::Config {
        secret: secret_name.clone(),
        error,
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| config_error(e.to_string()))?;
    let client = wrap(config).map_err(config_error)?;
    Ok((client, secret.metadata.resource_version))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(user: &str, cluster: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(&format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://m:6443\n{cluster}\
             users:\n- name: u\n  user:\n{user}contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        ))
        .expect("a kubeconfig")
    }

    #[test]
    fn inline_credentials_pass_and_commands_or_files_do_not() {
        let inline = kubeconfig(
            "    token: abc\n    client-certificate-data: Zm9v\n    client-key-data: Zm9v\n",
            "    certificate-authority-data: Zm9v\n",
        );
        assert_eq!(unsafe_entries(&inline), Vec::<String>::new());
        for (user, cluster, expected) in [
            (
                "    exec: {command: /bin/sh, apiVersion: client.authentication.k8s.io/v1}\n",
                "",
                "user u: exec (runs a command)",
            ),
            (
                "    auth-provider: {name: gcp, config: {cmd-path: /bin/sh}}\n",
                "",
                "user u: auth-provider (may run a command)",
            ),
            (
                "    tokenFile: /etc/shadow\n",
                "",
                "user u: tokenFile (reads a local file)",
            ),
            (
                "    client-certificate: /etc/c.pem\n",
                "",
                "user u: client-certificate (reads a local file)",
            ),
            (
                "    client-key: /etc/k.pem\n",
                "",
                "user u: client-key (reads a local file)",
            ),
            (
                "    token: abc\n",
                "    certificate-authority: /etc/ca.pem\n",
                "cluster c: certificate-authority (reads a local file)",
            ),
        ] {
            assert_eq!(unsafe_entries(&kubeconfig(user, cluster)), [expected]);
        }
    }
}
