//! Leadership: contending for the leader lock, reading and (as the
//! leader) computing and writing the assignment, and the operator's
//! rebalance and move commands.

use super::*;

impl Node {
    pub(super) fn contend(&self, st: &mut SessionState) {
        let (tx, rx) = oneshot::channel();
        let client = st.client.clone();
        let data = self.me.id.clone().into_bytes();
        actix::spawn(async move {
            let options = match zk::LockOptions::new(zk::Acls::anyone_all())
                .with_ancestor_options(persistent())
            {
                Ok(o) => o,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let prefix =
                zk::LockPrefix::new_curator("/leader", "latch-").expect("a valid lock prefix");
            let res = client
                .lock(prefix, &data, options)
                .await
                .map(|l| l.into_owned());
            let _ = tx.send(res);
        });
        st.lock_wait = Some(rx);
    }

    pub(super) async fn read_assignment(&self, st: &mut SessionState) -> Result<(), ClusterError> {
        if st.assignment_watch.is_some() && st.assignment_version >= 0 {
            return Ok(());
        }
        let (data, stat, watch) = st
            .client
            .get_and_watch_data("/assignment")
            .await
            .map_err(zk_err)?;
        st.assignment_watch = Some(Box::pin(watch.changed()));
        st.assignment = serde_json::from_slice(&data).unwrap_or_default();
        st.assignment_version = stat.version;
        Ok(())
    }

    /// The leader's duty: a new assignment when the live nodes changed (or
    /// the stored one names nodes that are gone, or another mode).
    pub(super) async fn lead(&self, st: &mut SessionState) -> Result<(), ClusterError> {
        let live: BTreeSet<String> = st.members.keys().cloned().collect();
        let mut current = st.assignment.shards.clone();
        current.resize(self.cfg.shards as usize, None);
        let stale_doc = st.assignment.leader.as_deref() != Some(self.me.id.as_str())
            || st.assignment.mode != Some(self.cfg.mode)
            || current
                .iter()
                .any(|o| o.as_ref().is_none_or(|o| !live.contains(o)));
        if !stale_doc && st.computed_for.as_ref() == Some(&live) {
            return Ok(());
        }
        let live_list: Vec<String> = live.iter().cloned().collect();
        let next = assign::assign(
            self.cfg.mode,
            &live_list,
            &self.me.id,
            self.cfg.shards,
            &current,
        );
        if next != current || stale_doc {
            tracing::info!(moves = assign::moves(&current, &next), nodes = ?live_list, "leader writes a new shard assignment");
            self.write_assignment(st, next).await?;
        }
        st.computed_for = Some(live);
        Ok(())
    }

    /// Writes the assignment if nobody changed it since it was read; as the
    /// leader, only while its lock node exists.
    pub(super) async fn write_assignment(
        &self,
        st: &mut SessionState,
        shards: Assignment,
    ) -> Result<(), ClusterError> {
        let doc = AssignmentDoc {
            leader: if st.lock.is_some() {
                Some(self.me.id.clone())
            } else {
                st.assignment.leader.clone()
            },
            mode: Some(self.cfg.mode),
            generation: st.assignment.generation + 1,
            shards,
        };
        let data = serde_json::to_vec(&doc).expect("an assignment serializes");
        let version = Some(st.assignment_version);
        let written = match &st.lock {
            Some(lock) => lock.set_data("/assignment", &data, version).await,
            None => st.client.set_data("/assignment", &data, version).await,
        };
        match written {
            Ok(stat) => {
                st.assignment = doc;
                st.assignment_version = stat.version;
                Ok(())
            }
            Err(zk::Error::BadVersion) => {
                // Changed meanwhile: read again next time.
                st.assignment_watch = None;
                st.assignment_version = -1;
                Err(ClusterError::NotPossible(
                    "the assignment changed meanwhile; try again".into(),
                ))
            }
            Err(zk::Error::RuntimeInconsistent) => {
                tracing::error!(
                    "lost the leadership while writing the assignment; contending again"
                );
                st.lock = None;
                self.contend(st);
                Err(ClusterError::NotPossible(
                    "this node is no longer the leader".into(),
                ))
            }
            Err(e) => Err(zk_err(e)),
        }
    }

    /// Carries out an operator's command; returns the shutdown reply when
    /// the node is stopping.
    pub(super) async fn command(
        &self,
        st: &mut SessionState,
        cmd: Command,
    ) -> Option<oneshot::Sender<()>> {
        match cmd {
            Command::Shutdown(done) => return Some(done),
            Command::Rebalance(reply) => {
                let res = self.rebalance(st).await;
                let _ = reply.send(res);
            }
            Command::Move { shard, to, reply } => {
                let res = self.move_shard(st, shard, &to).await;
                let _ = reply.send(res);
            }
        }
        None
    }

    pub(super) async fn fresh_assignment(
        &self,
        st: &mut SessionState,
    ) -> Result<Assignment, ClusterError> {
        st.assignment_watch = None;
        st.assignment_version = -1;
        self.read_assignment(st).await?;
        st.nodes_watch = None;
        self.read_members(st).await?;
        let mut current = st.assignment.shards.clone();
        current.resize(self.cfg.shards as usize, None);
        Ok(current)
    }

    pub(super) async fn rebalance(
        &self,
        st: &mut SessionState,
    ) -> Result<Assignment, ClusterError> {
        let current = self.fresh_assignment(st).await?;
        let live: Vec<String> = st.members.keys().cloned().collect();
        let leader = st
            .assignment
            .leader
            .clone()
            .unwrap_or_else(|| self.me.id.clone());
        let next = assign::assign(self.cfg.mode, &live, &leader, self.cfg.shards, &current);
        if next != current {
            tracing::info!(
                moves = assign::moves(&current, &next),
                "rebalancing on an operator's request"
            );
            self.write_assignment(st, next.clone()).await?;
        }
        Ok(next)
    }

    pub(super) async fn move_shard(
        &self,
        st: &mut SessionState,
        shard: u32,
        to: &str,
    ) -> Result<Assignment, ClusterError> {
        if shard >= self.cfg.shards {
            return Err(ClusterError::NoSuchShard(shard));
        }
        if self.cfg.mode == Mode::ActiveStandby {
            return Err(ClusterError::NotPossible(
                "in active-standby mode the leader scans every shard; shards move with the leadership".into(),
            ));
        }
        let current = self.fresh_assignment(st).await?;
        if !st.members.contains_key(to) {
            return Err(ClusterError::NoSuchNode(to.to_string()));
        }
        let next = assign::move_shard(&current, shard, to);
        if next != current {
            tracing::info!(shard, to, "moving a shard on an operator's request");
            self.write_assignment(st, next.clone()).await?;
        }
        Ok(next)
    }
}
