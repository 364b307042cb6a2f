//! `delayq-bench`: a load generator that drives a *running* delayq server over HTTP.
//!
//! Every scenario runs on its own fresh topic (`{prefix}-{scenario}-{unix_ms}`) and prints
//! exactly one JSON line to stdout; progress goes to stderr. Every wait has a deadline, so
//! the bench cannot hang on a stuck server. The bench is a pure HTTP client, speaking through
//! `delayq-client` (its own consumer loops, tuned to time each receipt, call the client's
//! `poll` and `ack` directly); the only other connection it makes is to Redis, in the
//! `restore` scenario, to wipe the schedule before asking the server to rebuild it from its
//! journal (`GET /reStore`, an operator's route the client does not cover).

mod api;
mod cli;
mod consumers;
mod pending;
mod push;
mod report;
mod scenarios;
mod time;

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use clap::Parser;

use crate::api::Api;
use crate::cli::{Cli, Scenario};
use crate::report::{round, Line, Outcome};
use crate::time::now_ms;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("delayq-bench: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the selected scenarios; returns whether all of them succeeded.
async fn run(cli: &Cli) -> Result<bool> {
    let api = Api::new(
        cli.push_url.as_deref().unwrap_or(&cli.url),
        &cli.consume_url,
        &cli.url,
        cli.tls_ca_file.as_deref(),
    )?;
    let scenarios = if cli.scenarios.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        cli.scenarios.clone()
    };

    let mut all_ok = true;
    for scenario in scenarios {
        let name = scenario.name();
        let topic = format!("{}-{}-{}", cli.topic_prefix, name, now_ms() as u64);
        eprintln!("[{name}] topic {topic}");
        let started = Instant::now();
        let outcome = scenario
            .run(cli, &api, &topic)
            .await
            .unwrap_or_else(|err| Outcome::Failed {
                error: format!("{err:#}"),
            });
        all_ok &= !outcome.is_failure();
        let line = Line {
            scenario: name,
            topic,
            outcome,
            elapsed_s: round(started.elapsed().as_secs_f64(), 3),
        };
        println!("{}", serde_json::to_string(&line)?);
        eprintln!("[{name}] done in {:.1} s", line.elapsed_s);
    }
    Ok(all_ok)
}
