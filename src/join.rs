//! Registration of a member cluster on the home cluster: the member's
//! kubeconfig goes into a Secret, and a MemberCluster points at it. Both are
//! server-side applied, so joining again updates them.

use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

use crate::api::{DEFAULT_KUBECONFIG_KEY, MemberCluster};

/// The namespace on home that holds member kubeconfig Secrets.
pub use crate::clusters::SECRETS_NAMESPACE;
const MANAGER: &str = "tfjob-federator-join";

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("the member kubeconfig is not usable: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("the home kubeconfig is not usable: {0}")]
    HomeKubeconfig(kube::config::KubeconfigError),
    #[error("building the home client: {0}")]
    HomeClient(kube::Error),
    #[error("{what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error("--address-template: {0}")]
    AddressTemplate(String),
}

/// How a member joins.
#[derive(Debug, Clone, Default)]
pub struct JoinOptions {
    pub address_template: Option<String>,
    pub export_services: bool,
}

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> JoinError {
    let what = what.into();
    move |source| JoinError::Api { what, source }
}

/// Installs (or updates) the CRDs this controller owns.
pub async fn install_crds(home: &Client) -> Result<(), JoinError> {
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(home.clone());
    let params = PatchParams::apply(MANAGER).force();
    for crd in crate::api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .map_err(api_error(format!("installing CRD {name}")))?;
    }
    // The controller's namespace: member kubeconfig Secrets, its signing
    // key, the leader Lease.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(home.clone());
    let namespace =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SECRETS_NAMESPACE}});
    namespaces
        .patch(SECRETS_NAMESPACE, &params, &Patch::Apply(&namespace))
        .await
        .map_err(api_error(format!("creating namespace {SECRETS_NAMESPACE}")))?;
    Ok(())
}

/// Registers `name` with the kubeconfig `member_kubeconfig` (YAML),
/// installing the CRDs on home first; nothing is written when the
/// kubeconfig does not parse or the address template is not usable.
pub async fn join(
    home: &Client,
    name: &str,
    member_kubeconfig: &str,
    options: &JoinOptions,
) -> Result<(), JoinError> {
    Kubeconfig::from_yaml(member_kubeconfig)?;
    if let Some(template) = &options.address_template {
        crate::builders::check_address_template(template).map_err(JoinError::AddressTemplate)?;
    }
    install_crds(home).await?;
    let params = PatchParams::apply(MANAGER).force();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(home.clone(), SECRETS_NAMESPACE);
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": SECRETS_NAMESPACE, "labels": {"app.kubernetes.io/managed-by": "tfjob-federator"}},
        "type": "Opaque",
        "stringData": {DEFAULT_KUBECONFIG_KEY: member_kubeconfig},
    });
    secrets
        .patch(name, &params, &Patch::Apply(&secret))
        .await
        .map_err(api_error(format!(
            "writing Secret {SECRETS_NAMESPACE}/{name}"
        )))?;
    let members: Api<MemberCluster> = Api::all(home.clone());
    let mut spec = json!({"kubeconfigSecretRef": {"name": name, "namespace": SECRETS_NAMESPACE, "key": DEFAULT_KUBECONFIG_KEY}, "exportServices": options.export_services});
    if let Some(template) = &options.address_template {
        spec["addressTemplate"] = json!(template);
    }
    let member = json!({"apiVersion": "federation.tfjob.io/v1alpha1", "kind": "MemberCluster", "metadata": {"name": name}, "spec": spec});
    members
        .patch(name, &params, &Patch::Apply(&member))
        .await
        .map_err(api_error(format!("writing MemberCluster {name}")))?;
    Ok(())
}

/// Installs the CRDs on the home cluster that the kubeconfig `home` (YAML)
/// reaches, then registers each `(name, kubeconfig)` as a member that
/// exports its Services: `sim --register` and `demo` use it for their
/// clusters, which serve ServiceExport and form one clusterset, so a job
/// may be split over them. With no members it only installs the CRDs.
pub async fn register_members(home: &str, members: &[(String, String)]) -> Result<(), JoinError> {
    let kubeconfig = Kubeconfig::from_yaml(home).map_err(JoinError::HomeKubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(JoinError::HomeKubeconfig)?;
    let client = Client::try_from(config).map_err(JoinError::HomeClient)?;
    install_crds(&client).await?;
    for (name, kubeconfig) in members {
        let options = JoinOptions {
            export_services: true,
            ..JoinOptions::default()
        };
        join(&client, name, kubeconfig, &options).await?;
    }
    Ok(())
}
