//! One ZooKeeper session after another: connecting, the session loop and
//! its steps, a disconnection's pause and resume, Redis's reachability, an
//! expiry, and leaving at shutdown.

use super::*;

impl Node {
    pub(super) async fn run(
        self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut stale: mpsc::UnboundedReceiver<Stale>,
    ) {
        loop {
            self.handle.update(|v| {
                v.session = Session::Connecting;
                v.leader = None;
                v.owned.clear();
                v.worker_id = None;
            });
            let client = tokio::select! {
                c = self.connect() => c,
                Some(cmd) = commands.recv() => {
                    if let Some(done) = refuse(cmd, "this node is not connected to ZooKeeper") {
                        let _ = done.send(());
                        return;
                    }
                    continue;
                }
            };
            match self.session(client, &mut commands, &mut stale).await {
                End::Expired => {
                    tracing::error!(
                        "ZooKeeper session expired; every scan stopped; opening a new session"
                    );
                    self.handle.update(|v| v.session = Session::Expired);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                End::Shutdown(done) => {
                    let _ = done.send(());
                    return;
                }
            }
        }
    }

    /// Opens a session under the chroot, retrying until the ensemble answers.
    pub(super) async fn connect(&self) -> zk::Client {
        let (hosts, chroot) = split_connect(&self.cfg.connect).expect("checked at start");
        let mut backoff = Duration::from_millis(200);
        loop {
            let attempt = async {
                let client = zk::Client::connector()
                    .with_session_timeout(self.cfg.session_timeout)
                    .with_connection_timeout(Duration::from_secs(2))
                    .connect(&hosts)
                    .await?;
                if chroot.is_empty() {
                    return Ok(client);
                }
                client.mkdir(&chroot, &persistent()).await?;
                client
                    .chroot(chroot.clone())
                    .map_err(|_| zk::Error::BadArguments(&"bad chroot"))
            };
            match tokio::time::timeout(
                self.cfg.session_timeout.max(Duration::from_secs(5)),
                attempt,
            )
            .await
            {
                Ok(Ok(c)) => return c,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, zookeeper = %self.cfg.connect, "cannot open a ZooKeeper session; retrying")
                }
                Err(_) => {
                    tracing::warn!(zookeeper = %self.cfg.connect, "opening a ZooKeeper session timed out; retrying")
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }

    pub(super) async fn session(
        &self,
        client: zk::Client,
        commands: &mut mpsc::UnboundedReceiver<Command>,
        stale: &mut mpsc::UnboundedReceiver<Stale>,
    ) -> End {
        let mut st = match self.join(client).await {
            Ok(st) => st,
            Err(e) => {
                tracing::warn!(error = %e, "cannot join the cluster in this session");
                return End::Expired;
            }
        };
        let mut states = st.client.state_watcher();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if !st.paused {
                if let Err(e) = self.step(&mut st).await {
                    tracing::warn!(error = %e, "cluster step failed; retrying");
                    if matches!(e, ClusterError::ZooKeeper(ref m) if m.contains("expired")) {
                        self.stop_all(&mut st).await;
                        return End::Expired;
                    }
                }
            }
            let lock_done = async {
                match st.lock_wait.as_mut() {
                    Some(rx) => rx.await.ok(),
                    None => std::future::pending().await,
                }
            };
            let assignment_changed = async {
                match st.assignment_watch.as_mut() {
                    Some(w) => w.await,
                    None => std::future::pending().await,
                }
            };
            let nodes_changed = async {
                match st.nodes_watch.as_mut() {
                    Some(w) => w.await,
                    None => std::future::pending().await,
                }
            };
            let owner_freed = async {
                if st.owner_watches.is_empty() {
                    std::future::pending::<()>().await;
                }
                futures::future::select_all(st.owner_watches.values_mut()).await;
            };
            tokio::select! {
                state = states.changed() => match state {
                    zk::SessionState::Disconnected => {
                        // Ids stay valid until the last confirmation's deadline
                        // (a third of the session): the session cannot have
                        // expired before then, so the worker id is still ours.
                        tracing::warn!("ZooKeeper connection lost; pausing every scan until it is back");
                        self.pause(&mut st).await;
                        self.handle.update(|v| v.session = Session::Disconnected);
                    }
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                        tracing::info!("ZooKeeper connection back; checking ownership before resuming");
                        self.handle.update(|v| v.session = Session::Connected);
                        // Watches may have been lost: re-arm them.
                        st.assignment_watch = None;
                        st.nodes_watch = None;
                        st.owner_watches.clear();
                        if let Err(e) = self.resume(&mut st).await {
                            tracing::warn!(error = %e, "cannot resume after reconnecting");
                        }
                    }
                    _ => {
                        self.stop_all(&mut st).await;
                        self.ids.revoke();
                        return End::Expired;
                    }
                },
                res = lock_done => {
                    st.lock_wait = None;
                    match res {
                        Some(Ok(lock)) => {
                            tracing::info!(node = %self.me.id, "elected cluster leader");
                            st.lock = Some(lock);
                            st.computed_for = None;
                        }
                        Some(Err(e)) => tracing::warn!(error = %e, "leader election failed; contending again"),
                        None => {}
                    }
                }
                _ = assignment_changed => st.assignment_watch = None,
                _ = nodes_changed => st.nodes_watch = None,
                _ = owner_freed => st.owner_watches.clear(),
                Some(s) = stale.recv() => self.on_stale(&mut st, s).await,
                Some(cmd) = commands.recv() => {
                    if let Some(done) = self.command(&mut st, cmd).await {
                        self.leave(&mut st).await;
                        return End::Shutdown(done);
                    }
                }
                _ = tick.tick() => {}
            }
        }
    }

    /// A node that reaches ZooKeeper but not Redis scans nothing, yet its
    /// owner nodes would keep every other node from its shards: once Redis
    /// has not answered for the session timeout, the node leaves the
    /// membership (stops its scans, deletes its owner nodes and its
    /// registration, gives up the leadership), so the leader hands its
    /// shards to nodes that can scan them. It comes back when Redis
    /// answers again. Returns whether the node is withdrawn now.
    pub(super) async fn watch_redis(&self, st: &mut SessionState) -> Result<bool, ClusterError> {
        let answers = matches!(
            tokio::time::timeout(Duration::from_secs(1), self.redis.records().ping()).await,
            Ok(Ok(()))
        );
        if answers {
            st.redis_down_since = None;
            if st.withdrawn {
                tracing::warn!("Redis answers again; rejoining the cluster");
                self.register(&st.client).await?;
                self.contend(st);
                st.withdrawn = false;
                st.nodes_watch = None;
                st.assignment_watch = None;
            }
            return Ok(false);
        }
        let since = *st.redis_down_since.get_or_insert_with(Instant::now);
        if !st.withdrawn && since.elapsed() >= self.cfg.session_timeout {
            tracing::error!(
                down_ms = since.elapsed().as_millis() as u64,
                "Redis has not answered for the session timeout; leaving the cluster's membership \
                 so other nodes scan this node's shards"
            );
            self.let_go_of_all(st).await;
            st.lock_wait = None;
            match st
                .client
                .delete(&format!("/nodes/{}", self.me.id), None)
                .await
            {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(zk_err(e)),
            }
            st.withdrawn = true;
            self.handle.update(|v| {
                v.owned.clear();
                v.leader = None;
            });
        } else if st.withdrawn {
            for shard in std::mem::take(&mut st.releasing) {
                if self.delete_owner(st, shard).await.is_err() {
                    st.releasing.insert(shard);
                }
            }
        }
        Ok(st.withdrawn)
    }

    /// One look at the cluster: confirm the lease, read the assignment and
    /// the members, (leader) recompute, then take and release shards.
    pub(super) async fn step(&self, st: &mut SessionState) -> Result<(), ClusterError> {
        if self.watch_redis(st).await? {
            return Ok(());
        }
        // The worker lease, confirmed by a server round trip.
        let sent = Instant::now();
        match st
            .client
            .check_stat(&format!("/workers/{}", st.worker))
            .await
        {
            Ok(Some(stat)) if stat.ephemeral_owner == st.client.session_id().0 => {
                let valid_for = self.valid_for(&st.client);
                self.permit.extend(sent + valid_for);
                if self.ids.worker() != Some(st.worker) {
                    worker::reserve_and_grant(
                        &self.redis,
                        &self.ids,
                        st.worker,
                        true,
                        sent + valid_for,
                    )
                    .await
                    .map_err(|e| ClusterError::NotPossible(e.to_string()))?;
                } else if let Err(e) = worker::reserve_and_grant(
                    &self.redis,
                    &self.ids,
                    st.worker,
                    false,
                    sent + valid_for,
                )
                .await
                {
                    tracing::warn!(error = %e, "cannot reserve ids ahead in Redis");
                }
            }
            Ok(_) => {
                self.ids.revoke();
                return Err(ClusterError::ZooKeeper(
                    "the worker id lease is gone: session expired".into(),
                ));
            }
            Err(zk::Error::SessionExpired) => {
                return Err(ClusterError::ZooKeeper("session expired".into()))
            }
            Err(e) => return Err(zk_err(e)),
        }

        self.read_members(st).await?;
        self.read_assignment(st).await?;
        if st.lock.is_some() {
            self.lead(st).await?;
        }
        self.reconcile(st).await?;
        let owned: Vec<(u32, i64)> = st.owned.iter().map(|(s, e)| (*s, *e)).collect();
        let members: Vec<Member> = st.members.values().cloned().collect();
        let doc = st.assignment.clone();
        self.handle.update(|v| {
            v.owned = owned;
            v.nodes = members;
            v.leader = doc.leader.clone();
            v.assignment = doc.shards.clone();
            v.assignment.resize(self.cfg.shards as usize, None);
        });
        Ok(())
    }

    /// Disconnected: stop scanning at once; ownership is kept for now.
    pub(super) async fn pause(&self, st: &mut SessionState) {
        self.permit.revoke();
        st.paused = true;
        for &shard in st.owned.keys() {
            let _ = self.router.send(StopShard { shard }).await;
        }
        self.handle.update(|v| v.owned.clear());
    }

    /// Reconnected within the session: resume the shards whose owner nodes
    /// are still this session's.
    pub(super) async fn resume(&self, st: &mut SessionState) -> Result<(), ClusterError> {
        if !st.paused {
            return Ok(());
        }
        let owned: Vec<(u32, i64)> = std::mem::take(&mut st.owned).into_iter().collect();
        for (i, &(shard, epoch)) in owned.iter().enumerate() {
            let checked = if i == 1 && crate::faults::once("zk_resume_check_fails") {
                Err(zk::Error::ConnectionLoss)
            } else {
                st.client.check_stat(&format!("/owners/{shard}")).await
            };
            let stat = match checked {
                Ok(stat) => stat,
                Err(e) => {
                    // The shards not checked yet keep their owner nodes:
                    // the next step takes each again if it is still
                    // assigned here and lets go of the others (dropped
                    // here, a shard moved away meanwhile would stay held by
                    // this session, scanned by no one). The steps go on:
                    // no further "connected" event need come (a check that
                    // timed out on a live connection), and a lost
                    // connection's "disconnected" event pauses again.
                    st.releasing.extend(owned[i..].iter().map(|(s, _)| *s));
                    st.paused = false;
                    return Err(zk_err(e));
                }
            };
            match stat {
                Some(stat)
                    if stat.ephemeral_owner == st.client.session_id().0 && stat.czxid == epoch =>
                {
                    st.owned.insert(shard, epoch);
                    self.router.do_send(StartShard { shard, epoch });
                }
                _ => tracing::warn!(
                    shard,
                    "the shard's owner node is no longer this session's; not resuming it"
                ),
            }
        }
        st.paused = false;
        Ok(())
    }

    /// Clean shutdown: stop the scans, free the owner nodes, leave.
    pub(super) async fn leave(&self, st: &mut SessionState) {
        self.let_go_of_all(st).await;
        let _ = st
            .client
            .delete(&format!("/nodes/{}", self.me.id), None)
            .await;
    }
}
