//! Joining the cluster: the paths, the worker-id lease, the registration
//! under `/nodes`, and reading the live members.

use super::*;

impl Node {
    /// Makes the paths, leases a worker id, registers, starts contending.
    pub(super) async fn join(&self, client: zk::Client) -> Result<SessionState, ClusterError> {
        for dir in ["/nodes", "/owners", "/workers", "/leader"] {
            client.mkdir(dir, &persistent()).await.map_err(zk_err)?;
        }
        match client.create("/assignment", b"{}", &persistent()).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(zk_err(e)),
        }
        // The shard count is the cluster's, for its life: a node started
        // with another one would scan shards no other node writes to.
        let count = self.cfg.shards.to_string();
        match client
            .create("/shards", count.as_bytes(), &persistent())
            .await
        {
            Ok(_) => {}
            Err(zk::Error::NodeExists) => {
                let (data, _) = client.get_data("/shards").await.map_err(zk_err)?;
                let recorded = String::from_utf8_lossy(&data).to_string();
                if recorded != count {
                    tracing::error!(
                        recorded = %recorded,
                        shards = self.cfg.shards,
                        "this cluster runs with --shards {recorded}, this node was started with --shards {count}: \
                         start it with --shards {recorded} (moving a deployment to another count: stop every node, \
                         run `delayq reshard --shards N`, and remove the cluster's /shards node in ZooKeeper); stopping"
                    );
                    crate::exit::now(2);
                }
            }
            Err(e) => return Err(zk_err(e)),
        }
        let worker = self.lease_worker(&client).await?;
        self.register(&client).await?;
        let mut st = SessionState {
            client,
            worker,
            owned: BTreeMap::new(),
            releasing: BTreeSet::new(),
            paused: false,
            assignment: AssignmentDoc::default(),
            assignment_version: -1,
            computed_for: None,
            members: BTreeMap::new(),
            lock: None,
            lock_wait: None,
            assignment_watch: None,
            nodes_watch: None,
            owner_watches: BTreeMap::new(),
            redis_down_since: None,
            withdrawn: false,
        };
        self.contend(&mut st);
        let granted = st.client.session_timeout().as_millis() as u64;
        let permit = self.valid_for(&st.client).as_millis() as u64;
        self.handle.update(|v| {
            v.session = Session::Connected;
            v.worker_id = Some(worker);
            v.session_timeout_ms = Some(granted);
            v.permit_ms = Some(permit);
        });
        tracing::info!(node = %self.me.id, worker, session = ?st.client.session_id(), "joined the cluster");
        Ok(st)
    }

    /// Takes the first free `/workers/N` and reserves its milliseconds.
    pub(super) async fn lease_worker(&self, client: &zk::Client) -> Result<u16, ClusterError> {
        for n in NODE_WORKERS {
            let sent = Instant::now();
            match client
                .create(
                    &format!("/workers/{n}"),
                    self.me.id.as_bytes(),
                    &ephemeral(),
                )
                .await
            {
                Ok(_) => {
                    worker::reserve_and_grant(
                        &self.redis,
                        &self.ids,
                        n,
                        true,
                        sent + self.valid_for(client),
                    )
                    .await
                    .map_err(|e| {
                        ClusterError::NotPossible(format!(
                            "cannot reserve worker {n}'s ids in Redis: {e}"
                        ))
                    })?;
                    return Ok(n);
                }
                Err(zk::Error::NodeExists) => continue,
                Err(e) => return Err(zk_err(e)),
            }
        }
        Err(ClusterError::NotPossible(
            "every worker id is leased".into(),
        ))
    }

    /// How long a confirmed session lets this node issue ids and scan: a
    /// third of the session timeout the servers granted (they clamp what
    /// was asked for to their own bounds), so the permit always lapses
    /// before the session could expire.
    pub(super) fn valid_for(&self, client: &zk::Client) -> Duration {
        client.session_timeout().min(self.cfg.session_timeout) / 3
    }

    /// Registers `/nodes/ID`. A registration of the same id held by another
    /// session is never removed: it may be a live process (paused, or a
    /// second process started with the same `--node-id`), not only this
    /// node's previous run. Its session ends by itself when that process is
    /// gone; until then this node waits (for about a session timeout, then
    /// tries again in a new session) and is not ready.
    pub(super) async fn register(&self, client: &zk::Client) -> Result<(), ClusterError> {
        let path = format!("/nodes/{}", self.me.id);
        let data = serde_json::to_vec(&self.me).expect("a member serializes");
        let deadline = Instant::now() + self.cfg.session_timeout + Duration::from_secs(1);
        let mut said = false;
        loop {
            match client.create(&path, &data, &ephemeral()).await {
                Ok(_) => return Ok(()),
                Err(zk::Error::NodeExists) => {
                    match client.check_stat(&path).await.map_err(zk_err)? {
                        Some(stat) if stat.ephemeral_owner != client.session_id().0 => {
                            if !said {
                                tracing::warn!(
                                    node = %self.me.id,
                                    session = format!("{:#x}", stat.ephemeral_owner),
                                    "another session holds this node id's registration (a previous run not yet expired, \
                                     or another process with the same --node-id); waiting for it to end"
                                );
                                said = true;
                            }
                            if Instant::now() >= deadline {
                                return Err(ClusterError::NotPossible(format!(
                                    "node id {} is registered by another live session",
                                    self.me.id
                                )));
                            }
                            tokio::time::sleep(Duration::from_millis(250)).await;
                        }
                        Some(_) => return Ok(()),
                        None => {}
                    }
                }
                Err(e) => return Err(zk_err(e)),
            }
        }
    }

    pub(super) async fn read_members(&self, st: &mut SessionState) -> Result<(), ClusterError> {
        let names = if st.nodes_watch.is_none() {
            let (names, _, watch) = st
                .client
                .get_and_watch_children("/nodes")
                .await
                .map_err(zk_err)?;
            st.nodes_watch = Some(Box::pin(watch.changed()));
            names
        } else if st.members.is_empty() {
            st.client.list_children("/nodes").await.map_err(zk_err)?
        } else {
            return Ok(());
        };
        let mut members = BTreeMap::new();
        for name in names {
            if let Some(m) = st.members.get(&name) {
                members.insert(name, m.clone());
                continue;
            }
            match st.client.get_data(&format!("/nodes/{name}")).await {
                Ok((data, _)) => {
                    if let Ok(m) = serde_json::from_slice::<Member>(&data) {
                        members.insert(name, m);
                    }
                }
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(zk_err(e)),
            }
        }
        st.members = members;
        Ok(())
    }
}
