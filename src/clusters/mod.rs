//! The clusters the controller talks to, home and members: how a member is
//! connected (its kubeconfig Secret to a client), the pod cache and routing
//! every cluster has ([`ClusterHandle`]), the informers of capacity and of
//! Pod Security levels placement reads, and the health probe with the
//! MemberCluster status it writes. The decisions made with these (where
//! replicas go, when a member is lost) are `placement`'s and
//! `member_health`'s, carried out by the MemberSupervisor.

mod capacity;
mod connect;
mod pods;
mod probe;
mod request_slots;

pub use crate::api::SECRETS_NAMESPACE;
pub use capacity::{CapacityWatch, Changed, PodSecurityWatch};
pub use connect::{ConnectError, member_client, unsafe_entries};
pub use pods::{ClusterActor, ClusterHandle, PodChanged, PodKey};
pub use probe::{IDENTITY_NAMESPACE, Probe, add_fenced, identity, member_status, probe};
pub use request_slots::{REQUEST_SLOTS, RequestSlotsLayer};
