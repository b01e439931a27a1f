//! Who a member cluster really is, and which MemberClusters may be used.
//!
//! A cluster's identity is the uid of its `kube-system` namespace: every
//! Kubernetes cluster has that namespace from its first start (the API
//! server makes it), its uid is random and never changes, and nothing but
//! deleting the cluster's storage gives a cluster another one. It is what
//! the Kubernetes community uses as a cluster ID (KEP-2149) and what a
//! member identity may read with one `get` on one named namespace.
//!
//! The controller records a member's identity in its status
//! (`status.identity`) when it is first connected and accepted. From then
//! on, a MemberCluster is used only while its credentials reach that same
//! cluster, and never when it stands for home or for a cluster another
//! MemberCluster already stands for. [`standings`] decides, for every
//! MemberCluster at once; the MemberSupervisor only carries it out.
//!
//! The rules, in order:
//! 1. A MemberCluster with the home cluster's name is refused: the name
//!    belongs to home (placements, metrics and statuses name clusters).
//! 2. One whose credentials now reach another cluster than the recorded one
//!    is refused, naming both identities (a rotation mistake): its jobs are
//!    treated as on an unreachable member (see
//!    docs/src/members/identity.md), and nothing the other cluster shows counts for them.
//! 3. One whose credentials reach the home cluster is refused.
//! 4. Of MemberClusters that reach the same cluster, the one created first
//!    (creationTimestamp, then name) is used and the others are refused,
//!    naming it: the older one is the registration jobs were placed through
//!    first, and an order that does not depend on when the controller
//!    happened to connect gives every controller the same answer.
//!
//! A MemberCluster whose cluster has not answered yet has no standing: it
//! is neither used nor refused until it does.

use std::collections::BTreeMap;
use std::fmt;

/// The reasons of a refused MemberCluster's Ready condition.
pub mod reason {
    /// Its name is the home cluster's.
    pub const NAMED_LIKE_HOME: &str = "NamedLikeHome";
    /// Its credentials reach another cluster than the one recorded.
    pub const IDENTITY_CHANGED: &str = "ClusterIdentityChanged";
    /// Its credentials reach the home cluster.
    pub const REACHES_HOME: &str = "ReachesHome";
    /// Another, older MemberCluster stands for the same cluster.
    pub const DUPLICATE: &str = "DuplicateCluster";
    /// The cluster's identity cannot be read yet.
    pub const IDENTITY_UNKNOWN: &str = "ClusterIdentityUnknown";
}

/// What the decision needs of one MemberCluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    pub name: String,
    /// `metadata.creationTimestamp` (RFC 3339); compared as instants.
    pub created: Option<jiff::Timestamp>,
    /// The identity recorded in its status when it was first accepted.
    pub recorded: Option<String>,
    /// The identity its credentials reach now (the last answer); None until
    /// the cluster answered.
    pub reached: Option<String>,
}

/// The home cluster: its name, and its identity once read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    pub name: String,
    pub identity: Option<String>,
}

/// Whether a MemberCluster may be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// It reaches the cluster it stands for, which no other MemberCluster
    /// claims first: record `identity` if not yet recorded, and use it.
    Accepted { identity: String },
    /// Not used; the Ready condition says why.
    Refused(Refusal),
    /// Its cluster (or home's identity) is not known yet: not used, not
    /// refused.
    Unknown,
}

/// Why a MemberCluster is not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NamedLikeHome {
        home: String,
    },
    IdentityChanged {
        recorded: String,
        reached: String,
        /// The MemberCluster that stands for the cluster now reached, if any.
        reached_member: Option<String>,
    },
    ReachesHome {
        home: String,
        identity: String,
    },
    Duplicate {
        /// The MemberCluster that keeps the cluster.
        kept_by: String,
        identity: String,
    },
}

impl Refusal {
    /// The Ready condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::NamedLikeHome { .. } => reason::NAMED_LIKE_HOME,
            Refusal::IdentityChanged { .. } => reason::IDENTITY_CHANGED,
            Refusal::ReachesHome { .. } => reason::REACHES_HOME,
            Refusal::Duplicate { .. } => reason::DUPLICATE,
        }
    }

    /// What ends the refusal: it is never lifted by waiting, someone edits
    /// the MemberCluster or its Secret.
    fn remedy(&self) -> &'static str {
        match self {
            Refusal::NamedLikeHome { .. } => "register the member under another name",
            Refusal::IdentityChanged { .. } => {
                "point its kubeconfig Secret back at that cluster, or delete and register the \
                 MemberCluster again to use the new one"
            }
            Refusal::ReachesHome { .. } => "home is a target of its own (homeIsTarget)",
            Refusal::Duplicate { .. } => "delete one of the two",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NamedLikeHome { home } => write!(
                f,
                "refused: the name {home} is the home cluster's; the controller never treats \
                 home as a member"
            )?,
            Refusal::IdentityChanged {
                recorded,
                reached,
                reached_member,
            } => {
                write!(
                    f,
                    "refused: its credentials now reach cluster {reached} (kube-system uid), \
                     not cluster {recorded} recorded when it was first connected"
                )?;
                if let Some(other) = reached_member {
                    write!(f, " ({reached} is MemberCluster {other}'s cluster)")?;
                }
                write!(
                    f,
                    "; its jobs are treated as on an unreachable member, and nothing that \
                     cluster shows counts for them"
                )?;
            }
            Refusal::ReachesHome { home, identity } => write!(
                f,
                "refused: its credentials reach the home cluster {home} (kube-system uid \
                 {identity}); a member must be another cluster"
            )?,
            Refusal::Duplicate { kept_by, identity } => write!(
                f,
                "refused: MemberCluster {kept_by} stands for the same cluster (kube-system uid \
                 {identity}) and was registered first; its capacity is counted once, there"
            )?,
        }
        write!(f, " ({})", self.remedy())
    }
}

/// The standing of every MemberCluster of `members`, by name (see the
/// module's rules). Pure.
pub fn standings(home: &Home, members: &[MemberView]) -> BTreeMap<String, Standing> {
    let mut out = BTreeMap::new();
    // Who stands for each cluster reached: the first by creation, then name.
    let mut order: Vec<&MemberView> = members.iter().collect();
    order.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    let mut keepers: BTreeMap<String, String> = BTreeMap::new();
    for member in &order {
        let standing = match standing_alone(home, member) {
            // The first accepted claim of a cluster keeps it.
            Standing::Accepted { identity } => match keepers.get(&identity) {
                Some(kept_by) => Standing::Refused(Refusal::Duplicate {
                    kept_by: kept_by.clone(),
                    identity,
                }),
                None => {
                    keepers.insert(identity.clone(), member.name.clone());
                    Standing::Accepted { identity }
                }
            },
            other => other,
        };
        out.insert(member.name.clone(), standing);
    }
    // A changed identity names the MemberCluster that holds the cluster reached.
    for member in members {
        if let Some(Standing::Refused(Refusal::IdentityChanged {
            reached,
            reached_member,
            ..
        })) = out.get_mut(&member.name)
        {
            *reached_member = keepers.get(reached.as_str()).cloned();
        }
    }
    out
}

/// Rules 1–3: what one MemberCluster is on its own.
fn standing_alone(home: &Home, member: &MemberView) -> Standing {
    if member.name == home.name {
        return Standing::Refused(Refusal::NamedLikeHome {
            home: home.name.clone(),
        });
    }
    let Some(reached) = &member.reached else {
        return Standing::Unknown;
    };
    if let Some(recorded) = member.recorded.as_ref().filter(|r| *r != reached) {
        return Standing::Refused(Refusal::IdentityChanged {
            recorded: recorded.clone(),
            reached: reached.clone(),
            reached_member: None,
        });
    }
    match &home.identity {
        None => Standing::Unknown,
        Some(identity) if identity == reached => Standing::Refused(Refusal::ReachesHome {
            home: home.name.clone(),
            identity: identity.clone(),
        }),
        Some(_) => Standing::Accepted {
            identity: reached.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home(identity: Option<&str>) -> Home {
        Home {
            name: "home".into(),
            identity: identity.map(str::to_string),
        }
    }

    fn member(
        name: &str,
        created: i64,
        recorded: Option<&str>,
        reached: Option<&str>,
    ) -> MemberView {
        MemberView {
            name: name.into(),
            created: Some(jiff::Timestamp::from_second(created).expect("a time")),
            recorded: recorded.map(str::to_string),
            reached: reached.map(str::to_string),
        }
    }

    fn accepted(identity: &str) -> Standing {
        Standing::Accepted {
            identity: identity.into(),
        }
    }

    /// What the table names, the members, and each one's expected standing.
    type Case = (&'static str, Vec<MemberView>, Vec<(&'static str, Standing)>);

    #[test]
    fn each_rule_in_turn() {
        let h = home(Some("H"));
        let cases: Vec<Case> = vec![
            (
                "first connection: accepted, to be recorded",
                vec![member("m1", 1, None, Some("A"))],
                vec![("m1", accepted("A"))],
            ),
            (
                "the recorded cluster again",
                vec![member("m1", 1, Some("A"), Some("A"))],
                vec![("m1", accepted("A"))],
            ),
            (
                "not answered yet: no standing",
                vec![member("m1", 1, Some("A"), None)],
                vec![("m1", Standing::Unknown)],
            ),
            (
                "named like home, even before it answers",
                vec![member("home", 1, None, None)],
                vec![(
                    "home",
                    Standing::Refused(Refusal::NamedLikeHome {
                        home: "home".into(),
                    }),
                )],
            ),
            (
                "named like home and reaching another cluster",
                vec![member("home", 1, None, Some("A"))],
                vec![(
                    "home",
                    Standing::Refused(Refusal::NamedLikeHome {
                        home: "home".into(),
                    }),
                )],
            ),
            (
                "credentials reach home",
                vec![member("sneaky", 1, None, Some("H"))],
                vec![(
                    "sneaky",
                    Standing::Refused(Refusal::ReachesHome {
                        home: "home".into(),
                        identity: "H".into(),
                    }),
                )],
            ),
            (
                "re-pointed at an unregistered cluster",
                vec![member("m1", 1, Some("A"), Some("C"))],
                vec![(
                    "m1",
                    Standing::Refused(Refusal::IdentityChanged {
                        recorded: "A".into(),
                        reached: "C".into(),
                        reached_member: None,
                    }),
                )],
            ),
            (
                "re-pointed at another member's cluster: that one keeps working",
                vec![
                    member("m1", 1, Some("A"), Some("B")),
                    member("m2", 2, Some("B"), Some("B")),
                ],
                vec![
                    (
                        "m1",
                        Standing::Refused(Refusal::IdentityChanged {
                            recorded: "A".into(),
                            reached: "B".into(),
                            reached_member: Some("m2".into()),
                        }),
                    ),
                    ("m2", accepted("B")),
                ],
            ),
            (
                "re-pointed at home: the change is what it says first",
                vec![member("m1", 1, Some("A"), Some("H"))],
                vec![(
                    "m1",
                    Standing::Refused(Refusal::IdentityChanged {
                        recorded: "A".into(),
                        reached: "H".into(),
                        reached_member: None,
                    }),
                )],
            ),
            (
                "two for one cluster: the older keeps it, whatever the names",
                vec![
                    member("b-copy", 5, None, Some("A")),
                    member("z-first", 1, Some("A"), Some("A")),
                ],
                vec![
                    (
                        "b-copy",
                        Standing::Refused(Refusal::Duplicate {
                            kept_by: "z-first".into(),
                            identity: "A".into(),
                        }),
                    ),
                    ("z-first", accepted("A")),
                ],
            ),
            (
                "created in the same second: the name decides",
                vec![
                    member("m2", 1, None, Some("A")),
                    member("m1", 1, None, Some("A")),
                ],
                vec![
                    ("m1", accepted("A")),
                    (
                        "m2",
                        Standing::Refused(Refusal::Duplicate {
                            kept_by: "m1".into(),
                            identity: "A".into(),
                        }),
                    ),
                ],
            ),
            (
                "a refused older one keeps nothing",
                vec![
                    member("old", 1, Some("X"), Some("A")),
                    member("new", 2, None, Some("A")),
                ],
                vec![
                    (
                        "old",
                        Standing::Refused(Refusal::IdentityChanged {
                            recorded: "X".into(),
                            reached: "A".into(),
                            reached_member: Some("new".into()),
                        }),
                    ),
                    ("new", accepted("A")),
                ],
            ),
            (
                "an older one that has not answered yet claims nothing yet",
                vec![
                    member("old", 1, Some("A"), None),
                    member("new", 2, None, Some("A")),
                ],
                vec![("old", Standing::Unknown), ("new", accepted("A"))],
            ),
        ];
        for (what, members, expected) in cases {
            let got = standings(&h, &members);
            let expected: BTreeMap<String, Standing> = expected
                .into_iter()
                .map(|(n, s)| (n.to_string(), s))
                .collect();
            assert_eq!(got, expected, "{what}");
        }
    }

    #[test]
    fn until_home_is_known_no_member_is_accepted() {
        let got = standings(&home(None), &[member("m1", 1, None, Some("A"))]);
        assert_eq!(got["m1"], Standing::Unknown);
    }

    #[test]
    fn messages_name_both_sides() {
        let changed = Refusal::IdentityChanged {
            recorded: "uid-a".into(),
            reached: "uid-b".into(),
            reached_member: Some("member-2".into()),
        };
        let text = changed.to_string();
        for part in ["uid-a", "uid-b", "member-2", "unreachable"] {
            assert!(text.contains(part), "{text}");
        }
        let duplicate = Refusal::Duplicate {
            kept_by: "member-1".into(),
            identity: "uid-a".into(),
        }
        .to_string();
        assert!(duplicate.contains("member-1") && duplicate.contains("uid-a"));
        let home = Refusal::ReachesHome {
            home: "home".into(),
            identity: "uid-h".into(),
        }
        .to_string();
        assert!(home.contains("home") && home.contains("uid-h"));
        assert!(
            Refusal::NamedLikeHome {
                home: "home".into()
            }
            .to_string()
            .contains("home cluster's")
        );
    }
}
