//! Shard ownership: taking the shards assigned here (`/owners/S`, whose
//! czxid is the epoch), letting go of the others, and a shard actor's
//! report that its epoch went stale.

use super::*;

impl Node {
    /// Takes the shards assigned here, lets go of the others.
    pub(super) async fn reconcile(&self, st: &mut SessionState) -> Result<(), ClusterError> {
        let mine: BTreeSet<u32> = st
            .assignment
            .shards
            .iter()
            .enumerate()
            .filter(|(_, o)| o.as_deref() == Some(self.me.id.as_str()))
            .map(|(s, _)| s as u32)
            .filter(|s| *s < self.cfg.shards)
            .collect();
        let letting_go: Vec<u32> = st
            .owned
            .keys()
            .copied()
            .filter(|s| !mine.contains(s))
            .collect();
        for shard in letting_go {
            // The actor finishes its batch and stops before the owner node
            // goes, so the next owner starts only after this one stopped.
            let _ = self.router.send(StopShard { shard }).await;
            st.owned.remove(&shard);
            st.releasing.insert(shard);
        }
        // Owner nodes of shards let go of: deleted now, or, when the delete
        // fails, at the next step (the shard is not scanned here meanwhile,
        // and nobody else can take it until its node is gone).
        let mut first_error = None;
        for shard in std::mem::take(&mut st.releasing) {
            if mine.contains(&shard) {
                continue;
            }
            let deleted = if crate::faults::once("zk_delete_owner_fails") {
                Err(ClusterError::ZooKeeper(
                    "injected fault: delete failed".into(),
                ))
            } else {
                self.delete_owner(st, shard).await
            };
            match deleted {
                Ok(()) => tracing::info!(shard, "handed the shard off"),
                Err(e) => {
                    tracing::warn!(shard, error = %e, "cannot delete the shard's owner node; trying again");
                    st.releasing.insert(shard);
                    first_error.get_or_insert(e);
                }
            }
        }
        for shard in mine {
            if st.owned.contains_key(&shard) {
                continue;
            }
            if let Some(epoch) = self.take(st, shard).await? {
                st.owned.insert(shard, epoch);
                self.router.do_send(StartShard { shard, epoch });
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Creates `/owners/S` if no other live session holds it; its czxid is
    /// the epoch.
    pub(super) async fn take(
        &self,
        st: &mut SessionState,
        shard: u32,
    ) -> Result<Option<i64>, ClusterError> {
        let path = format!("/owners/{shard}");
        match st
            .client
            .create(&path, self.me.id.as_bytes(), &ephemeral())
            .await
        {
            Ok((stat, _)) => {
                let epoch = if stat.czxid > 0 {
                    stat.czxid
                } else {
                    match st.client.check_stat(&path).await.map_err(zk_err)? {
                        Some(s) => s.czxid,
                        None => return Ok(None),
                    }
                };
                Ok(Some(epoch))
            }
            Err(zk::Error::NodeExists) => {
                let (data, stat, watch) = match st.client.get_and_watch_data(&path).await {
                    Ok(d) => d,
                    Err(zk::Error::NoNode) => return Ok(None),
                    Err(e) => return Err(zk_err(e)),
                };
                st.owner_watches.insert(shard, Box::pin(watch.changed()));
                if stat.ephemeral_owner == st.client.session_id().0 {
                    return Ok(Some(stat.czxid));
                }
                // Another session holds it (even one that names this node
                // id: a previous run not yet expired, or a live process
                // paused): wait for it to let go or for its session to end.
                let _ = data;
                Ok(None)
            }
            Err(e) => Err(zk_err(e)),
        }
    }

    pub(super) async fn delete_owner(
        &self,
        st: &SessionState,
        shard: u32,
    ) -> Result<(), ClusterError> {
        let path = format!("/owners/{shard}");
        match st.client.check_stat(&path).await.map_err(zk_err)? {
            Some(stat) if stat.ephemeral_owner == st.client.session_id().0 => {
                match st.client.delete(&path, Some(stat.version)).await {
                    Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                    Err(e) => Err(zk_err(e)),
                }
            }
            _ => Ok(()),
        }
    }

    pub(super) async fn stop_all(&self, st: &mut SessionState) {
        self.permit.revoke();
        for shard in std::mem::take(&mut st.owned).into_keys() {
            let _ = self.router.send(StopShard { shard }).await;
        }
        self.handle.update(|v| v.owned.clear());
    }

    /// Redis refused a scan: it holds a higher epoch than this owner's.
    /// Either another node scanned the shard after this one took it (then
    /// ZooKeeper no longer says this session owns it, and the shard is let
    /// go), or ZooKeeper itself was rebuilt or restored from an older
    /// snapshot, so its zxids (the epochs) start again below what Redis
    /// keeps. In that case this session holds the shard's owner node, and
    /// takes the shard past the stored epoch in one fenced step: with a
    /// permit freshly confirmed by the round trip that read the owner node,
    /// it raises the epoch to the stored one + 1 only if the stored one is
    /// still the one it was refused by (takeover.lua). A paused old owner
    /// cannot do the same: its permit has lapsed, and its session no longer
    /// holds the owner node.
    pub(super) async fn on_stale(&self, st: &mut SessionState, s: Stale) {
        if st.owned.get(&s.shard) != Some(&s.epoch) {
            return;
        }
        st.owned.remove(&s.shard);
        let path = format!("/owners/{}", s.shard);
        let sent = Instant::now();
        let ours = match st.client.check_stat(&path).await {
            Ok(Some(stat)) => stat.ephemeral_owner == st.client.session_id().0,
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(error = %e, shard = s.shard, "cannot read the shard's owner node; trying again");
                return;
            }
        };
        if !ours {
            if crate::actors::health::may_log(s.shard, "let-go").is_some() {
                tracing::error!(
                    shard = s.shard,
                    epoch = s.epoch,
                    stored = s.stored,
                    "another owner raised the shard's epoch; letting the shard go"
                );
            }
            if let Err(e) = self.delete_owner(st, s.shard).await {
                tracing::warn!(error = %e, shard = s.shard, "cannot delete the owner node");
            }
            return;
        }
        self.permit.extend(sent + self.valid_for(&st.client));
        if !self.permit.valid() {
            return;
        }
        let next = s.stored.saturating_add(1);
        match self
            .redis
            .ownership()
            .take_over(s.shard, s.stored, next)
            .await
        {
            Ok(true) => {
                tracing::warn!(
                    shard = s.shard,
                    owner_epoch = s.epoch,
                    stored = s.stored,
                    epoch = next,
                    "ZooKeeper says this node owns the shard but its epoch is below Redis's \
                     (the ensemble was rebuilt or restored); took the shard past the stored epoch"
                );
                st.owned.insert(s.shard, next);
                self.router.do_send(StartShard {
                    shard: s.shard,
                    epoch: next,
                });
            }
            Ok(false) => {
                if crate::actors::health::may_log(s.shard, "takeover").is_some() {
                    tracing::warn!(
                        shard = s.shard,
                        stored = s.stored,
                        "the shard's epoch moved during a takeover; trying again"
                    );
                }
            }
            Err(e) => {
                if crate::actors::health::may_log(s.shard, "takeover").is_some() {
                    tracing::warn!(shard = s.shard, error = %e, "cannot take the shard past the stored epoch; trying again");
                }
            }
        }
    }

    /// Stops every scan, deletes this session's owner nodes (one whose
    /// delete fails stays in `releasing`, tried again later) and gives up
    /// the leadership.
    pub(super) async fn let_go_of_all(&self, st: &mut SessionState) {
        let owned: Vec<u32> = st
            .owned
            .keys()
            .copied()
            .chain(std::mem::take(&mut st.releasing))
            .collect();
        self.stop_all(st).await;
        for shard in owned {
            if let Err(e) = self.delete_owner(st, shard).await {
                st.releasing.insert(shard);
                tracing::warn!(shard, error = %e, "cannot delete the owner node; trying again");
            }
        }
        st.lock = None;
    }
}
