//! Who each member is: the MemberSupervisor reads home's identity, asks
//! `member_identity::standings` for every member's standing, records an
//! accepted member's identity, and runs a connection's informers only while
//! its cluster is accepted (see docs/src/members/identity.md).

use actix::prelude::*;
use kube::ResourceExt;

use super::{Informers, MemberSupervisor, capacity_freed};
use crate::api::MemberCluster;
use crate::clusters::{self, CapacityWatch, ClusterActor, PodSecurityWatch};
use crate::member_health::{Condition, Event};
use crate::member_identity::{self, Home, MemberView, Standing};

#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct HomeIdentity(Result<String, String>);

impl MemberSupervisor {
    /// Reads home's identity (once it is known, never again).
    pub(super) fn read_home_identity(&mut self, ctx: &mut Context<Self>) {
        if self.home_identity.is_ok() || std::mem::replace(&mut self.reading_home_identity, true) {
            return;
        }
        let client = self.shared.home.client.clone();
        let me = ctx.address();
        tokio::spawn(async move {
            me.do_send(HomeIdentity(clusters::identity(&client).await));
        });
    }

    /// The identity recorded for member `name`: by this controller, else in
    /// its status (by an earlier one).
    pub(super) fn recorded_identity(&self, name: &str) -> Option<String> {
        let spec = self.specs.get(name)?;
        let uid = spec.metadata.uid.clone().unwrap_or_default();
        match self.recorded.get(name) {
            Some((recorded_uid, identity)) if *recorded_uid == uid => Some(identity.clone()),
            _ => spec
                .status
                .as_ref()
                .and_then(|s| s.identity.as_ref())
                .map(|i| i.kube_system_uid.clone()),
        }
    }

    /// Decides every member's standing (`member_identity::standings`) and
    /// carries it out: an accepted member's identity is recorded and its
    /// informers run; a refused member's informers stop, and its health
    /// machine hears that it is refused.
    pub(super) fn reassess(&mut self, ctx: &mut Context<Self>) {
        let home = Home {
            name: self.shared.home.name.clone(),
            identity: self.home_identity.clone().ok(),
        };
        let views: Vec<MemberView> = self
            .specs
            .iter()
            .map(|(name, spec)| MemberView {
                name: name.clone(),
                created: spec.metadata.creation_timestamp.as_ref().map(|t| t.0),
                recorded: self.recorded_identity(name),
                reached: self.connections.get(name).and_then(|c| c.reached.clone()),
            })
            .collect();
        for (name, standing) in member_identity::standings(&home, &views) {
            if !self.connections.contains_key(&name) {
                continue;
            }
            if let Standing::Accepted { identity } = &standing
                && self.recorded_identity(&name).is_none()
            {
                let uid = self.specs.get(&name).and_then(|s| s.metadata.uid.clone());
                tracing::info!(cluster = %name, identity = %identity, "member cluster identity recorded");
                self.recorded
                    .insert(name.clone(), (uid.unwrap_or_default(), identity.clone()));
            }
            let accepted = matches!(standing, Standing::Accepted { .. });
            let Some(connection) = self.connections.get_mut(&name) else {
                continue;
            };
            let stopped =
                matches!(standing, Standing::Refused(_)) && connection.informers.take().is_some();
            if connection.standing != standing {
                if let Standing::Refused(refusal) = &standing {
                    tracing::warn!(cluster = %name, reason = refusal.reason(), message = %refusal, "member cluster refused");
                }
                connection.standing = standing;
            }
            if stopped {
                tracing::warn!(cluster = %name, "member cluster refused; its informers stopped");
                self.health_step(ctx, &name, Event::Refused);
            }
            if accepted {
                self.start_informers(ctx, &name);
            }
        }
    }

    /// Starts the informers of an accepted member's connection.
    fn start_informers(&mut self, ctx: &mut Context<Self>, name: &str) {
        let changed = capacity_freed(ctx);
        let metrics = self.shared.metrics.clone();
        let Some(connection) = self.connections.get_mut(name) else {
            return;
        };
        if connection.informers.is_some() {
            return;
        }
        let mut actor = connection.idle.take().unwrap_or_else(|| {
            // Stopped once (refused, then accepted again): a new informer
            // keeps the routes and cache.
            let (actor, handle) = ClusterActor::replacing(
                name.to_string(),
                connection.handle.client.clone(),
                metrics,
                Some(&connection.handle),
            );
            connection.handle = handle;
            actor
        });
        if let Standing::Accepted { identity } = &connection.standing {
            actor.expect_identity(identity.clone());
        }
        let client = connection.handle.client.clone();
        connection.informers = Some(Informers {
            _actor: actor.start(),
            capacity: CapacityWatch::start(&client, changed.clone()),
            pod_security: PodSecurityWatch::start(&client, changed),
        });
        tracing::info!(cluster = %name, "member cluster accepted; its informers run");
    }

    /// A MemberCluster with home's name is never connected; its status says
    /// why (written when it changes).
    pub(super) fn refuse_home_name(&mut self, member: &MemberCluster) {
        let refusal = member_identity::Refusal::NamedLikeHome {
            home: self.shared.home.name.clone(),
        };
        let message = refusal.to_string();
        let current = member.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.condition_type == crate::api::READY_CONDITION)
        });
        if current.is_some_and(|c| c.message.as_deref() == Some(message.as_str())) {
            return;
        }
        tracing::warn!(cluster = %member.name_any(), reason = refusal.reason(), message = %message, "member cluster refused");
        let condition = Condition {
            ready: false,
            reason: refusal.reason(),
            message,
        };
        self.write_status(&member.name_any(), &condition, None);
    }
}

impl Handler<HomeIdentity> for MemberSupervisor {
    type Result = ();

    fn handle(&mut self, msg: HomeIdentity, ctx: &mut Self::Context) {
        self.reading_home_identity = false;
        match msg.0 {
            Ok(identity) => {
                tracing::info!(identity = %identity, "home cluster identity read");
                self.home_identity = Ok(identity);
                self.reassess(ctx);
                // Members probed before this answered "identity unknown":
                // probed again now, they need not wait for the next round.
                let names: Vec<String> = self.connections.keys().cloned().collect();
                for name in names {
                    self.probe(ctx, &name);
                }
            }
            Err(why) => {
                if self.home_identity.as_ref().err() != Some(&why) {
                    tracing::warn!(error = %why, "reading the home cluster's identity failed; no member is used until it is read");
                }
                self.home_identity = Err(why);
                // No member is used meanwhile: read again soon, not at the
                // next probe round.
                ctx.run_later(self.shared.config.retry_interval(), |act, ctx| {
                    act.read_home_identity(ctx);
                });
            }
        }
    }
}
